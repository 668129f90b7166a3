// common/jsonpos.c — find the line:col of a key or value at a path in JSON text.
//
// A second, position-only scan of text Jansson has already accepted: it walks
// down the path, skipping sibling values without building anything, so error
// messages can point at the exact token. It never trusts the text: on malformed
// input (or text that ends early) it returns -1 instead of reading past the NUL.
// Skipping is iterative (a depth counter, not recursion), so deeply nested
// input cannot exhaust the stack.
#include "common/jsonpos.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

// p at an opening quote; returns the byte after the closing quote, or NULL.
// An escape is a backslash plus one byte: \uXXXX continues with hex digits,
// which can never be a quote, so this is enough to find the real end.
static const char *skip_string(const char *p) {
    for (p++; *p != '"'; p++) {
        if (*p == '\0') return NULL;
        if (*p == '\\' && *++p == '\0') return NULL;
    }
    return p + 1;
}

// p at the first byte of a value; returns the byte after it, or NULL.
static const char *skip_value(const char *p) {
    if (*p == '"') return skip_string(p);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        do {
            if (*p == '\0') return NULL;
            if (*p == '"') {
                if (!(p = skip_string(p))) return NULL;
                continue;
            }
            if (*p == '{' || *p == '[') depth++;
            else if (*p == '}' || *p == ']') depth--;
            p++;
        } while (depth > 0);
        return p;
    }
    // number, true, false, null: runs until a delimiter
    const char *start = p;
    while (*p && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' &&
           *p != '\n' && *p != '\r')
        p++;
    return p > start ? p : NULL;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        unsigned d;
        if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
        else return -1;   // also stops at NUL: never reads past the text
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

// Does the JSON string at p (opening quote) decode to exactly seg[0..len)?
// Escapes are decoded to UTF-8 (surrogate pairs joined), so a key written as
// "\u00e9" matches the path segment "é", as it does in Jansson's tree.
static int key_matches(const char *p, const char *seg, size_t len) {
    size_t i = 0;
    for (p++; *p != '"'; ) {
        unsigned char buf[4];
        size_t n = 1;
        if (*p == '\0') return 0;
        if (*p != '\\') {
            buf[0] = (unsigned char)*p++;
        } else {
            p++;
            switch (*p) {
            case '"': case '\\': case '/': buf[0] = (unsigned char)*p; break;
            case 'b': buf[0] = '\b'; break;
            case 'f': buf[0] = '\f'; break;
            case 'n': buf[0] = '\n'; break;
            case 'r': buf[0] = '\r'; break;
            case 't': buf[0] = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (hex4(p + 1, &cp)) return 0;
                p += 4;
                if (cp >= 0xD800 && cp <= 0xDBFF) {   // high surrogate: needs its pair
                    if (p[1] != '\\' || p[2] != 'u' || hex4(p + 3, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return 0;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    return 0;                           // lone low surrogate
                }
                if (cp < 0x80) {
                    buf[0] = (unsigned char)cp;
                } else if (cp < 0x800) {
                    buf[0] = (unsigned char)(0xC0 | (cp >> 6));
                    buf[1] = (unsigned char)(0x80 | (cp & 0x3F));
                    n = 2;
                } else if (cp < 0x10000) {
                    buf[0] = (unsigned char)(0xE0 | (cp >> 12));
                    buf[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                    buf[2] = (unsigned char)(0x80 | (cp & 0x3F));
                    n = 3;
                } else {
                    buf[0] = (unsigned char)(0xF0 | (cp >> 18));
                    buf[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                    buf[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                    buf[3] = (unsigned char)(0x80 | (cp & 0x3F));
                    n = 4;
                }
                break;
            }
            default: return 0;   // invalid escape (or NUL): not valid JSON
            }
            p++;
        }
        for (size_t k = 0; k < n; k++, i++)
            if (i >= len || (unsigned char)seg[i] != buf[k]) return 0;
    }
    return i == len;
}

// The member of the object at `obj` whose key is seg[0..len): its key string and
// value. Scans every member: with duplicate keys (where a caller allowed them)
// Jansson keeps the last one, so the last match is the one reported. 0 or -1.
static int member(const char *obj, const char *seg, size_t len, const char **key_out, const char **val_out) {
    if (*obj != '{') return -1;
    const char *found_key = NULL, *found_val = NULL;
    const char *q = skip_ws(obj + 1);
    if (*q != '}') {
        for (;;) {
            if (*q != '"') return -1;
            const char *k = q;
            if (!(q = skip_string(q))) return -1;
            q = skip_ws(q);
            if (*q != ':') return -1;
            const char *v = skip_ws(q + 1);
            if (!(q = skip_value(v))) return -1;
            if (key_matches(k, seg, len)) {
                found_key = k;
                found_val = v;
            }
            q = skip_ws(q);
            if (*q == '}') break;
            if (*q != ',') return -1;
            q = skip_ws(q + 1);
        }
    }
    if (!found_val) return -1;
    *key_out = found_key;
    *val_out = found_val;
    return 0;
}

int jsonpos_find(const char *text, const char *path, int want_key, int *line, int *col) {
    if (!text || !path) return -1;
    const char *cur = skip_ws(text);   // the value the path has reached so far
    const char *key = NULL;            // its key, when it is an object member
    int first = 1;
    while (*path) {
        if (path[0] == '[' && path[1] == '"') {   // object member written ["key"]
            const char *seg = path + 2, *end = strstr(seg, "\"]");
            if (!end || *cur != '{') return -1;
            size_t len = (size_t)(end - seg);
            path = end + 2;
            const char *found_key = NULL, *found_val = NULL;
            if (member(cur, seg, len, &found_key, &found_val)) return -1;
            cur = found_val;
            key = found_key;
        } else if (*path == '[') {            // array element [i]
            long idx = 0;
            const char *q = path + 1;
            if (*q < '0' || *q > '9') return -1;
            for (; *q >= '0' && *q <= '9'; q++) {
                idx = idx * 10 + (*q - '0');
                if (idx > INT_MAX) return -1;
            }
            if (*q != ']') return -1;
            path = q + 1;
            if (*cur != '[') return -1;
            cur = skip_ws(cur + 1);
            if (*cur == ']') return -1;   // empty array
            for (long i = 0; i < idx; i++) {
                if (!(cur = skip_value(cur))) return -1;
                cur = skip_ws(cur);
                if (*cur != ',') return -1;   // ']' (too few elements) or garbage
                cur = skip_ws(cur + 1);
            }
            key = NULL;
        } else {                       // object member: [.]key up to '.', '[' or end
            if (!first) {               // after the first segment a key needs its '.'
                if (*path != '.') return -1;
                path++;
            }
            if (path[0] == '[' && path[1] == '"') continue;   // .["key"]
            const char *seg = path;
            while (*path && *path != '.' && *path != '[') path++;
            size_t len = (size_t)(path - seg);
            if (len == 0 || *cur != '{') return -1;
            const char *found_key = NULL, *found_val = NULL;
            if (member(cur, seg, len, &found_key, &found_val)) return -1;
            cur = found_val;
            key = found_key;
        }
        first = 0;
    }
    const char *target = want_key ? key : cur;
    if (!target || *target == '\0') return -1;
    // 1-based line; 1-based column in bytes from the line's start.
    int ln = 1;
    const char *bol = text;
    for (const char *s = text; s < target; s++)
        if (*s == '\n') {
            ln++;
            bol = s + 1;
        }
    *line = ln;
    *col = (int)(target - bol) + 1;
    return 0;
}
