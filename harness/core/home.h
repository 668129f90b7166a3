// harness/core/home.h — where the runner's data lives: the folder that holds scenarios/, configs/,
// golden/baselines/, probe/, adapters/ and examples/ (scenario files name the others relative
// to themselves, so the folder keeps the source tree's layout). Found at run time, never
// compiled in:
//   1. $NSA_HARNESS_HOME, when set;
//   2. an installed tree: PREFIX/share/nsa-harness beside this executable's PREFIX/bin;
//   3. a build tree: the source folder named in the file nsa-harness-home that CMake writes
//      beside the executables at configure time;
//   4. the executable's parent folder when it holds scenarios/ (a build folder inside the
//      source tree); else the working directory.
// Reports (`run`, `baseline record`, `bisect` without --out) go to HOME/reports in a source
// tree and to ./reports from an installed one (its share folder is not the user's to write).
#ifndef NSA_HARNESS_HOME_H
#define NSA_HARNESS_HOME_H
#include <stddef.h>

// 0, or -1 with why in err: $NSA_HARNESS_HOME is set to a folder without scenarios/.
int harness_home_check(char *err, size_t n);
// The data folder (absolute where it could be resolved); the same string for the process.
const char *harness_home(void);
// HOME/rel, interned: valid for the process.
const char *harness_path(const char *rel);
// Where reports go by default: HOME/reports, or ./reports for an installed tree.
const char *harness_reports_dir(void);
#endif
