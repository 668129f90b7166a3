// harness/report/plot.c — see plot.h. Plain SVG 1.1, fixed size, colour-blind-safe
// palette (Okabe–Ito), nice tick steps (1, 2, 5 x 10^k).
#define _POSIX_C_SOURCE 200809L
#include "harness/report/plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

static const char *const PALETTE[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00",
                                      "#CC79A7", "#56B4E9", "#F0E442", "#000000"};
#define N_PAL 8
#define W 720
#define H 400
#define ML 70   // margins: left, right, top, bottom
#define MR 190
#define MT 36
#define MB 50

static double nice_step(double span, int target) {
    double raw = span / target, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void header(Str *s, const char *title) {
    str_printf(s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                  "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    str_add(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    str_printf(s, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", ML);
    str_add_xml(s, title);
    str_add(s, "</text>\n");
}

static void legend(Str *s, const char *const *names, int n) {
    for (int i = 0; i < n && i < 24; i++) {
        int y = MT + 10 + i * 18;
        str_printf(s, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"10\" fill=\"%s\"/>\n", W - MR + 16, y - 9,
                   PALETTE[i % N_PAL]);
        str_printf(s, "<text x=\"%d\" y=\"%d\">", W - MR + 36, y);
        char buf[40];
        snprintf(buf, sizeof buf, "%s", names[i]);
        if (strlen(names[i]) > 26) snprintf(buf + 23, sizeof buf - 23, "…");
        str_add_xml(s, buf);
        str_add(s, "</text>\n");
    }
}

static void fmt_tick(char *out, size_t n, double v, double step) {
    if (fabs(v) < step * 1e-9) v = 0;
    if (step >= 1 && fabs(v) < 1e6) snprintf(out, n, "%.0f", v);
    else snprintf(out, n, "%.3g", v);
}

static int finish(const char *path, Str *s) {
    str_add(s, "</svg>\n");
    int rc = write_file_atomic(path, str_c(s), s->len);
    str_free(s);
    return rc;
}

// The plotting area of a line chart: data ranges mapped to pixels.
typedef struct {
    double x0, x1, y0, y1;
    int pw, ph;
} Frame;
static double frame_x(const Frame *f, double x) { return ML + (x - f->x0) / (f->x1 - f->x0) * f->pw; }
static double frame_y(const Frame *f, double y) { return MT + f->ph - (y - f->y0) / (f->y1 - f->y0) * f->ph; }

// Title, frame, grid, ticks and axis labels for the finite points of the series.
// Returns 0, or -1 when no point is finite (a "no finite data" note is written instead).
static int lines_axes(Str *s, Frame *f, const char *title, const char *xlabel, const char *ylabel,
                      const PlotSeries *series, int n_series) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int k = 0; k < n_series; k++)
        for (int i = 0; i < series[k].n; i++) {
            double x = series[k].x[i], y = series[k].y[i];
            if (!isfinite(x) || !isfinite(y)) continue;
            x0 = fmin(x0, x); x1 = fmax(x1, x);
            y0 = fmin(y0, y); y1 = fmax(y1, y);
        }
    header(s, title);
    if (!isfinite(x0)) {
        str_printf(s, "<text x=\"%d\" y=\"%d\">no finite data</text>\n", ML, H / 2);
        return -1;
    }
    if (x1 == x0) { x0 -= 1; x1 += 1; }
    if (y1 == y0) { y0 -= fabs(y0) * 0.05 + 1e-3; y1 += fabs(y1) * 0.05 + 1e-3; }
    double pad = (y1 - y0) * 0.05;
    y0 -= pad; y1 += pad;
    *f = (Frame){x0, x1, y0, y1, W - ML - MR, H - MT - MB};
    const int pw = f->pw, ph = f->ph;
    str_printf(s, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", ML, MT, pw, ph);
    double ys = nice_step(y1 - y0, 6), xs = nice_step(x1 - x0, 8);
    char t[32];
    for (double v = ceil(y0 / ys) * ys; v <= y1; v += ys) {
        str_printf(s, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", ML, ML + pw, frame_y(f, v),
                   frame_y(f, v));
        fmt_tick(t, sizeof t, v, ys);
        str_printf(s, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", ML - 6, frame_y(f, v) + 4, t);
    }
    for (double v = ceil(x0 / xs) * xs; v <= x1; v += xs) {
        fmt_tick(t, sizeof t, v, xs);
        str_printf(s, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", frame_x(f, v), MT + ph + 16, t);
    }
    str_printf(s, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", ML + pw / 2, H - 10);
    str_add_xml(s, xlabel);
    str_printf(s, "</text>\n<text transform=\"translate(16,%d) rotate(-90)\" text-anchor=\"middle\">", MT + ph / 2);
    str_add_xml(s, ylabel);
    str_add(s, "</text>\n");
    return 0;
}

// One series as a polyline (a lone finite point as a dot); dashed: stroke-dasharray.
static void lines_series(Str *s, const Frame *f, const PlotSeries *ser, const char *colour, int dashed) {
    str_printf(s, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\"%s points=\"", colour,
               dashed ? " stroke-dasharray=\"6,4\"" : "");
    int pts = 0;
    for (int i = 0; i < ser->n; i++) {
        double x = ser->x[i], y = ser->y[i];
        if (!isfinite(x) || !isfinite(y)) continue;
        str_printf(s, "%s%.1f,%.1f", pts++ ? " " : "", frame_x(f, x), frame_y(f, y));
    }
    str_add(s, "\"/>\n");
    if (pts == 1)   // a lone point would be invisible as a line
        for (int i = 0; i < ser->n; i++)
            if (isfinite(ser->x[i]) && isfinite(ser->y[i]))
                str_printf(s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", frame_x(f, ser->x[i]),
                           frame_y(f, ser->y[i]), colour);
}

int plot_lines(const char *path, const char *title, const char *xlabel, const char *ylabel,
               const PlotSeries *series, int n_series) {
    Str s = {0};
    Frame f;
    if (lines_axes(&s, &f, title, xlabel, ylabel, series, n_series)) return finish(path, &s);
    const char *names[64];
    for (int k = 0; k < n_series && k < 64; k++) {
        names[k] = series[k].name;
        lines_series(&s, &f, &series[k], PALETTE[k % N_PAL], 0);
    }
    legend(&s, names, n_series < 64 ? n_series : 64);
    return finish(path, &s);
}

// The legend of an overlay: a colour per pair, then the two line styles.
static void overlay_legend(Str *s, const PlotSeries *a, int n_pairs, const char *label_a, const char *label_b) {
    const char *names[24];
    int n = n_pairs < 22 ? n_pairs : 22;
    for (int k = 0; k < n; k++) names[k] = a[k].name;
    legend(s, names, n);
    for (int j = 0; j < 2; j++) {
        int y = MT + 10 + (n + j) * 18;
        str_printf(s, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#000\" stroke-width=\"1.8\"%s/>\n",
                   W - MR + 16, W - MR + 30, y - 4, y - 4, j ? " stroke-dasharray=\"4,2\"" : "");
        str_printf(s, "<text x=\"%d\" y=\"%d\">", W - MR + 36, y);
        str_add_xml(s, j ? label_b : label_a);
        str_add(s, "</text>\n");
    }
}

int plot_overlay(const char *path, const char *title, const char *xlabel, const char *ylabel, const PlotSeries *a,
                 const PlotSeries *b, int n_pairs, const char *label_a, const char *label_b) {
    PlotSeries *all = xcalloc((size_t)(2 * n_pairs + 1), sizeof(PlotSeries));
    for (int k = 0; k < n_pairs; k++) {
        all[2 * k] = a[k];
        all[2 * k + 1] = b[k];
    }
    Str s = {0};
    Frame f;
    if (lines_axes(&s, &f, title, xlabel, ylabel, all, 2 * n_pairs) == 0) {
        for (int k = 0; k < n_pairs; k++) {
            lines_series(&s, &f, &a[k], PALETTE[k % N_PAL], 0);
            lines_series(&s, &f, &b[k], PALETTE[k % N_PAL], 1);
        }
        overlay_legend(&s, a, n_pairs, label_a, label_b);
    }
    free(all);
    return finish(path, &s);
}

int plot_bars(const char *path, const char *title, const char *ylabel, const char *const *group_labels,
              int n_groups, const char *const *bar_names, int n_bars, const double *values, int log_y) {
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n_groups * n_bars; i++) {
        double v = values[i];
        if (!isfinite(v) || (log_y && v <= 0)) continue;
        lo = fmin(lo, v);
        hi = fmax(hi, v);
    }
    Str s = {0};
    header(&s, title);
    const int pw = W - ML - MR, ph = H - MT - MB;
    if (!isfinite(lo)) { lo = log_y ? 1e-6 : 0; hi = log_y ? 1 : 1; }
    double y0, y1;
    if (log_y) {
        y0 = floor(log10(lo)) - 0.5;
        y1 = ceil(log10(hi)) + 0.1;
        if (y1 - y0 < 1) y1 = y0 + 1;
    } else {
        y0 = fmin(0, lo);
        y1 = hi > y0 ? hi * 1.08 : y0 + 1;
    }
#define BY(v) (MT + ph - (((log_y ? log10(v) : (v)) - y0) / (y1 - y0)) * ph)
    str_printf(&s, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", ML, MT, pw, ph);
    char t[32];
    if (log_y) {
        for (double e = ceil(y0); e <= y1; e += 1) {
            double py = MT + ph - (e - y0) / (y1 - y0) * ph;
            str_printf(&s, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", ML, ML + pw, py, py);
            str_printf(&s, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">1e%d</text>\n", ML - 6, py + 4, (int)e);
        }
    } else {
        double st = nice_step(y1 - y0, 6);
        for (double v = ceil(y0 / st) * st; v <= y1; v += st) {
            str_printf(&s, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", ML, ML + pw, BY(v), BY(v));
            fmt_tick(t, sizeof t, v, st);
            str_printf(&s, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", ML - 6, BY(v) + 4, t);
        }
    }
    const double gw = (double)pw / (n_groups > 0 ? n_groups : 1), bw = gw * 0.8 / (n_bars > 0 ? n_bars : 1);
    for (int g = 0; g < n_groups; g++) {
        double gx = ML + g * gw + gw * 0.1;
        for (int b = 0; b < n_bars; b++) {
            double v = values[g * n_bars + b];
            double top;
            int floor_mark = 0;
            if (!isfinite(v)) continue;
            if (log_y && v <= 0) {
                top = MT + ph - 3;
                floor_mark = 1;
            } else top = BY(v);
            double base = MT + ph;
            str_printf(&s, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", gx + b * bw,
                       top, bw * 0.92, base - top, PALETTE[b % N_PAL]);
            if (floor_mark)
                str_printf(&s, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#c00\">0</text>\n",
                           gx + b * bw + bw / 2, top - 4);
        }
        str_printf(&s, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", gx + gw * 0.4, MT + ph + 16);
        str_add_xml(&s, group_labels[g]);
        str_add(&s, "</text>\n");
    }
#undef BY
    str_printf(&s, "<text transform=\"translate(16,%d) rotate(-90)\" text-anchor=\"middle\">", MT + ph / 2);
    str_add_xml(&s, ylabel);
    str_add(&s, "</text>\n");
    legend(&s, bar_names, n_bars);
    return finish(path, &s);
}
