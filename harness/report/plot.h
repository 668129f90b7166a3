// harness/report/plot.h — small SVG charts for RESULTS.md (loss curves, gate
// statistics) and for nsa-harness compare (two reports' loss curves overlaid). SVG
// because it is an image file every Markdown viewer that matters (GitHub, GitLab,
// browsers) shows, and it needs no library.
#ifndef NSA_HARNESS_PLOT_H
#define NSA_HARNESS_PLOT_H

typedef struct {
    const char *name;    // legend
    const double *x, *y; // n points (non-finite y values are gaps)
    int n;
} PlotSeries;

// Line chart; returns 0 or -1 (I/O).
int plot_lines(const char *path, const char *title, const char *xlabel, const char *ylabel,
               const PlotSeries *series, int n_series);

// Two runs of the same series overlaid on one line chart (e.g. a case's loss in two
// reports): a[k] and b[k] share colour k, a[k] drawn solid and b[k] dashed; the legend
// names each pair by a[k].name and shows which style is which run (label_a, label_b).
// Returns 0 or -1 (I/O).
int plot_overlay(const char *path, const char *title, const char *xlabel, const char *ylabel, const PlotSeries *a,
                 const PlotSeries *b, int n_pairs, const char *label_a, const char *label_b);

// Grouped bar chart: n_groups groups (labels), n_bars bars per group (legend
// names), values[g * n_bars + b]. log_y: logarithmic y axis (values <= 0 drawn
// at the bottom, marked).
int plot_bars(const char *path, const char *title, const char *ylabel, const char *const *group_labels,
              int n_groups, const char *const *bar_names, int n_bars, const double *values, int log_y);
#endif
