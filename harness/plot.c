// harness/plot.c — see plot.h. Plain SVG 1.1, fixed size, colour-blind-safe
// palette (Okabe–Ito), nice tick steps (1, 2, 5 x 10^k).
#define _POSIX_C_SOURCE 200809L
#include "harness/plot.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/util.h"

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

int plot_lines(const char *path, const char *title, const char *xlabel, const char *ylabel,
               const PlotSeries *series, int n_series) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int k = 0; k < n_series; k++)
        for (int i = 0; i < series[k].n; i++) {
            double x = series[k].x[i], y = series[k].y[i];
            if (!isfinite(x) || !isfinite(y)) continue;
            x0 = fmin(x0, x); x1 = fmax(x1, x);
            y0 = fmin(y0, y); y1 = fmax(y1, y);
        }
    Str s = {0};
    header(&s, title);
    if (!isfinite(x0)) {
        str_printf(&s, "<text x=\"%d\" y=\"%d\">no finite data</text>\n", ML, H / 2);
        return finish(path, &s);
    }
    if (x1 == x0) { x0 -= 1; x1 += 1; }
    if (y1 == y0) { y0 -= fabs(y0) * 0.05 + 1e-3; y1 += fabs(y1) * 0.05 + 1e-3; }
    double pad = (y1 - y0) * 0.05;
    y0 -= pad; y1 += pad;
    const int pw = W - ML - MR, ph = H - MT - MB;
#define PX(x) (ML + ((x) - x0) / (x1 - x0) * pw)
#define PY(y) (MT + ph - ((y) - y0) / (y1 - y0) * ph)
    str_printf(&s, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", ML, MT, pw, ph);
    double ys = nice_step(y1 - y0, 6), xs = nice_step(x1 - x0, 8);
    char t[32];
    for (double v = ceil(y0 / ys) * ys; v <= y1; v += ys) {
        str_printf(&s, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", ML, ML + pw, PY(v), PY(v));
        fmt_tick(t, sizeof t, v, ys);
        str_printf(&s, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", ML - 6, PY(v) + 4, t);
    }
    for (double v = ceil(x0 / xs) * xs; v <= x1; v += xs) {
        fmt_tick(t, sizeof t, v, xs);
        str_printf(&s, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", PX(v), MT + ph + 16, t);
    }
    str_printf(&s, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", ML + pw / 2, H - 10);
    str_add_xml(&s, xlabel);
    str_printf(&s, "</text>\n<text transform=\"translate(16,%d) rotate(-90)\" text-anchor=\"middle\">", MT + ph / 2);
    str_add_xml(&s, ylabel);
    str_add(&s, "</text>\n");
    const char *names[64];
    for (int k = 0; k < n_series && k < 64; k++) {
        names[k] = series[k].name;
        str_printf(&s, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" points=\"", PALETTE[k % N_PAL]);
        int pts = 0;
        for (int i = 0; i < series[k].n; i++) {
            double x = series[k].x[i], y = series[k].y[i];
            if (!isfinite(x) || !isfinite(y)) continue;
            str_printf(&s, "%s%.1f,%.1f", pts++ ? " " : "", PX(x), PY(y));
        }
        str_add(&s, "\"/>\n");
        if (pts == 1)   // a lone point would be invisible as a line
            for (int i = 0; i < series[k].n; i++)
                if (isfinite(series[k].x[i]) && isfinite(series[k].y[i]))
                    str_printf(&s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(series[k].x[i]),
                               PY(series[k].y[i]), PALETTE[k % N_PAL]);
    }
#undef PX
#undef PY
    legend(&s, names, n_series < 64 ? n_series : 64);
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
