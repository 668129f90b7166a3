// kernels/cpu/real.h — the CPU backend is one C source compiled twice:
// with NSA_REAL_F64 undefined `real` is float (backend "cpu"), with it defined
// `real` is double (backend "cpu64", used by the fp64 gradient check).
// CPU_FN(name) gives the precision-suffixed symbol: name_f32 / name_f64.
#ifndef NSA_CPU_REAL_H
#define NSA_CPU_REAL_H
#include <math.h>
#ifdef NSA_REAL_F64
typedef double real;
#define CPU_FN(name) name##_f64
#define REAL_NAME "f64"
#define R_EXP exp
#define R_LOG log
#define R_SQRT sqrt
#define R_MAX_ABS 1.79e308
#else
typedef float real;
#define CPU_FN(name) name##_f32
#define REAL_NAME "f32"
#define R_EXP expf
#define R_LOG logf
#define R_SQRT sqrtf
#define R_MAX_ABS 3.4e38f
#endif
#endif
