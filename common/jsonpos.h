// common/jsonpos.h — where a value sits in a JSON text.
//
// Jansson parses a document but keeps no positions, so a semantic error ("n must
// be >= 3") could not say file:line:col. jsonpos re-scans the (already valid) text
// and returns the line and column of the value (or of the key) at a path such as
// "nsa.w" or "matrix.branch[2]". Lines and columns are 1-based; columns count
// bytes (Jansson's syntax-error columns count characters, so the two differ
// only after non-ASCII text on the same line).
#ifndef NSA_COMMON_JSONPOS_H
#define NSA_COMMON_JSONPOS_H

// Path syntax: keys separated by '.', array elements as [i]; "" is the root.
// A key that contains '.' or '[' is written ["key"] (e.g. overrides["train.steps"]);
// such a key may not contain the two characters "].
// want_key != 0: position of the key string of the last path element (objects
// only), else of its value. Returns 0 and sets *line/*col, or -1 if not found.
int jsonpos_find(const char *text, const char *path, int want_key, int *line, int *col);
#endif
