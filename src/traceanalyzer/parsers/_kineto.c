/* The compiled Kineto event decoder: a JSON array of Chrome-trace events -> Arrow columns.
 *
 * decode(piece) reads the bytes of a JSON array of events once and returns the raw frame's
 * columns (the rows of complete and begin/end events, as traceanalyzer.parsers.kineto_events
 * builds them) as Arrow C data interface capsules, or None when the piece holds anything it
 * does not take with certainty (malformed JSON, a value of an unexpected type, escaped keys,
 * duplicated fields, numbers out of range...): the caller then decodes that piece with the
 * Python decoder, the reference, which gives the frame or the error. So this decoder never
 * decides an error and never guesses: whatever it returns is what the reference returns.
 *
 * Only the fields the frame keeps are looked at; other keys and the events of other phases are
 * skipped (validated as JSON, nothing allocated). Strings are dictionary-encoded while parsing
 * (one copy of each distinct name; each column remembers the last id it interned, and pid/tid
 * the last number) and copied once into the output columns. The parse runs without the GIL.
 *
 * Where the time goes, and what keeps it low: strings, keys and runs of blanks are scanned
 * eight bytes at a time (portable C11 word tricks; the exact position through ctz where the
 * compiler has it, a byte loop elsewhere); the keys we keep are recognized by their quoted text
 * (event keys) or by their length then their text (args keys); an event's fields are marked in
 * bitmasks instead of cleared slots. The columns of every row (row, ph, cat, name, pid, tid, ts,
 * dur) are reserved together, once per row, and written in place with their validity bits; the
 * args columns and the input spans, null on most rows, keep only their values with their rows
 * and are scattered at the end into zeroed buffers (large ones are fresh pages: the rows without
 * a value cost no page fault).
 *
 * C11 and the CPython API only; the Arrow structs are those of the Arrow C data interface
 * specification.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* words read with memcpy hold their first byte in their lowest bits (else: byte loops) */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define LITTLE_ENDIAN_WORDS 1
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86) || defined(_M_ARM64))
#define LITTLE_ENDIAN_WORDS 1
#endif

/* the index of the lowest byte of a nonzero word whose high bit is set */
#if defined(LITTLE_ENDIAN_WORDS) && (defined(__GNUC__) || defined(__clang__))
#define FIRST_BYTE(hit) ((size_t)__builtin_ctzll(hit) >> 3)
#endif

#if defined(__GNUC__) || defined(__clang__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define LIKELY(x) (x)
#define UNLIKELY(x) (x)
#endif

/* ---- Arrow C data interface (the specification's structs) ---------------------------------- */

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

#define ARROW_FLAG_NULLABLE 2

/* ---- growable buffers, arena, string dictionary -------------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_grow(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + extra) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

/* blocks that never move: unescaped strings and formatted integers live here */
typedef struct Block {
    struct Block *next;
    size_t len, cap;
    char data[];
} Block;

typedef struct {
    Block *head;
} Arena;

static char *arena_alloc(Arena *a, size_t n) {
    if (!a->head || a->head->cap - a->head->len < n) {
        size_t cap = n > 65536 ? n : 65536;
        Block *b = malloc(sizeof(Block) + cap);
        if (!b) return NULL;
        b->next = a->head;
        b->len = 0;
        b->cap = cap;
        a->head = b;
    }
    char *p = a->head->data + a->head->len;
    a->head->len += n;
    return p;
}

static void arena_free(Arena *a) {
    Block *b = a->head;
    while (b) {
        Block *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
}

typedef struct {
    const char *p;
    size_t len;
} Str;

typedef struct {
    Str *entries;
    uint64_t *hashes;
    size_t n, cap;
    int32_t *slots; /* -1: empty */
    size_t nslots;  /* a power of two */
} Dict;

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
    h ^= h >> 32;
    h *= 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

static int dict_rehash(Dict *d, size_t nslots) {
    int32_t *slots = malloc(nslots * sizeof(int32_t));
    if (!slots) return -1;
    memset(slots, 0xff, nslots * sizeof(int32_t));
    for (size_t i = 0; i < d->n; i++) {
        size_t j = d->hashes[i] & (nslots - 1);
        while (slots[j] >= 0) j = (j + 1) & (nslots - 1);
        slots[j] = (int32_t)i;
    }
    free(d->slots);
    d->slots = slots;
    d->nslots = nslots;
    return 0;
}

/* the id of the string (p, n), added when new; -1 when out of memory */
static int32_t dict_intern(Dict *d, const char *p, size_t n) {
    if ((d->n + 1) * 2 > d->nslots && dict_rehash(d, d->nslots ? d->nslots * 2 : 1024)) return -1;
    uint64_t h = hash_bytes(p, n);
    size_t j = h & (d->nslots - 1);
    for (;;) {
        int32_t e = d->slots[j];
        if (e < 0) break;
        if (d->hashes[e] == h && d->entries[e].len == n && memcmp(d->entries[e].p, p, n) == 0) return e;
        j = (j + 1) & (d->nslots - 1);
    }
    if (d->n == d->cap) {
        if (d->n >= INT32_MAX / 2) return -1;
        size_t cap = d->cap ? d->cap * 2 : 256;
        Str *e = realloc(d->entries, cap * sizeof(Str));
        if (!e) return -1;
        d->entries = e;
        uint64_t *hs = realloc(d->hashes, cap * sizeof(uint64_t));
        if (!hs) return -1;
        d->hashes = hs;
        d->cap = cap;
    }
    d->entries[d->n] = (Str){p, n};
    d->hashes[d->n] = h;
    d->slots[j] = (int32_t)d->n;
    return (int32_t)d->n++;
}

static void dict_free(Dict *d) {
    free(d->entries);
    free(d->hashes);
    free(d->slots);
    memset(d, 0, sizeof(*d));
}

/* ---- the frame's columns ------------------------------------------------------------------- */

enum { K_I64, K_F64, K_STR };

typedef struct {
    const char *name;
    int kind;
    Buf data;  /* int64 / double / int32 dictionary id per row (len unused: Parser.n_rows rows) */
    Buf valid; /* the Arrow validity bitmap (one bit per row, zeroed ahead) */
    int64_t nulls;
    int sparse; /* the args columns, mostly null: data holds the values of the rows in `rows` */
    Buf rows;   /* sparse: the int64 row of each value, ascending */
    int32_t last_id;  /* the dictionary id this column interned last (-1: none): a cache */
    int32_t int_id;   /* pid / tid: the id of the text of int_val (-1: none) */
    int64_t int_val;
} Col;

/* the args keys we read, in the order of kineto_events.ARG_SCHEMA (1: integer, 0: string) */
static const struct {
    const char *key;
    int integer;
} ARGS[] = {
    {"External id", 1}, {"external id", 1}, {"correlation", 1}, {"stream", 1}, {"device", 1},
    {"Sequence number", 1}, {"Fwd thread id", 1}, {"bytes", 1}, {"Collective name", 0},
    {"In msg nelems", 1}, {"Out msg nelems", 1}, {"Group size", 1}, {"dtype", 0},
    {"Process Group Name", 0}, {"Process Group Description", 0}, {"Process Group Ranks", 0},
    {"Seq", 1}, {"Src Rank", 1}, {"Dst Rank", 1},
};
#define N_ARGS ((int)(sizeof(ARGS) / sizeof(ARGS[0])))
#define A_DIMS N_ARGS /* "Input Dims": the raw value's span */
#define A_TYPES (N_ARGS + 1) /* "Input type": the raw value's span */

/* column indices: row, ph, cat, name, pid, tid, ts, dur, args..., dims offset, dims length,
   types offset, types length */
enum { C_ROW, C_PH, C_CAT, C_NAME, C_PID, C_TID, C_TS, C_DUR, C_ARG0 };
#define C_DIMS_OFF (C_ARG0 + N_ARGS)
#define C_DIMS_LEN (C_DIMS_OFF + 1)
#define C_TYPES_OFF (C_DIMS_LEN + 1)
#define C_TYPES_LEN (C_TYPES_OFF + 1)
#define N_COLS (C_TYPES_LEN + 1)

/* a value as read: what the typed decoder would have to validate */
enum { V_ABSENT = 0, V_NULL, V_STR, V_INT, V_FLOAT, V_BIG, V_OTHER };

typedef struct {
    int type;
    Str s;                       /* V_STR: the unescaped text */
    int64_t i;                   /* V_INT */
    const unsigned char *b, *e;  /* numbers (V_FLOAT, V_BIG, V_INT) and raw spans */
} Val;

/* a number whose double the parser leaves to PyOS_string_to_double (with the GIL) */
typedef struct {
    int col;
    int64_t row;
    const unsigned char *b, *e;
} Slow;

typedef struct {
    const unsigned char *start, *p, *end;
    Arena arena;
    Dict dict;
    Col cols[N_COLS];
    Buf slow; /* Slow entries */
    int64_t n_events, n_rows, cap_rows; /* every column has room for cap_rows rows */
    int oom;
    int32_t id_empty, id_ph[3];
} Parser;

#define GIVE_UP (-1)
#define NO_MEMORY (-2)

static const unsigned char IS_WS[256] = {[' '] = 1, ['\n'] = 1, ['\r'] = 1, ['\t'] = 1};

#ifdef LITTLE_ENDIAN_WORDS
/* per byte of w: its high bit set where the byte is c (exact: no borrow between bytes) */
static inline uint64_t bytes_equal(uint64_t w, unsigned char c) {
    const uint64_t lows = 0x7F7F7F7F7F7F7F7FULL;
    uint64_t x = w ^ (0x0101010101010101ULL * c);
    return ~(((x & lows) + lows) | x) & ~lows;
}
#endif

static inline void skip_ws(Parser *P) {
    const unsigned char *p = P->p, *end = P->end;
    if (p < end && !IS_WS[*p]) return; /* the usual cases: no blank, or one */
    if (end - p >= 2 && !IS_WS[p[1]]) {
        P->p = p + 1;
        return;
    }
#if defined(LITTLE_ENDIAN_WORDS) && defined(FIRST_BYTE)
    /* runs of blanks (a newline and an indent), eight bytes at a time */
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t other = ~(bytes_equal(w, ' ') | bytes_equal(w, '\n') | bytes_equal(w, '\r') | bytes_equal(w, '\t')) &
                         0x8080808080808080ULL;
        if (other) {
            P->p = p + FIRST_BYTE(other);
            return;
        }
        p += 8;
    }
#endif
    while (p < end && IS_WS[*p]) p++;
    P->p = p;
}

static int hexval(unsigned c) {
    if (c >= '0' && c <= '9') return (int)(c - '0');
    c |= 0x20;
    if (c >= 'a' && c <= 'f') return (int)(c - 'a' + 10);
    return -1;
}

static int read_hex4(const unsigned char *p, const unsigned char *end, unsigned *out) {
    if (end - p < 4) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p[k]);
        if (h < 0) return -1;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return 0;
}

/* length of the valid UTF-8 sequence at p (lead byte >= 0x80), 0 when invalid */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) n = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) n = 3;
    else if (c == 0xED) n = 3, hi = 0x9F;
    else if (c == 0xF0) n = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) n = 4, hi = 0x8F;
    else return 0;
    if ((size_t)(end - p) < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t k = 2; k < n; k++)
        if (p[k] < 0x80 || p[k] > 0xBF) return 0;
    return n;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The first byte from p on that a string's fast path stops at: a quote, a backslash, a control
 * or a non-ASCII byte (end when none). Eight bytes at a time: per byte, the high bit of `hit` is
 * set for those bytes (and maybe for bytes after one of them, through a borrow), so its lowest
 * set bit is exact. */

static inline int plain_byte(unsigned c) { return c != '"' && c != '\\' && c >= 0x20 && c < 0x80; }

static inline const unsigned char *scan_plain(const unsigned char *p, const unsigned char *end) {
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
        uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
        uint64_t hit = (((q - ones) & ~q) | ((b - ones) & ~b) | (w - ones * 0x20) | w) & highs;
        if (hit) {
#ifdef FIRST_BYTE
            return p + FIRST_BYTE(hit);
#else
            break;
#endif
        }
        p += 8;
    }
    while (p < end && plain_byte(*p)) p++;
    return p;
}

/* The string at P->p (on its opening quote). Strict JSON: valid escapes, no raw control
 * characters, valid UTF-8, no lone surrogates. out != NULL: its text (unescaped into the arena
 * when it has escapes); *escaped tells whether it had any. */
static int read_string(Parser *P, Str *out, int *escaped) {
    const unsigned char *p = P->p + 1, *end = P->end;
    const unsigned char *begin = p;
    int esc = 0;
    for (;;) {
        p = scan_plain(p, end);
        if (p >= end) return GIVE_UP;
        unsigned c = *p;
        if (c == '"') break;
        if (c < 0x20) return GIVE_UP;
        if (c >= 0x80) {
            size_t n = utf8_len(p, end);
            if (!n) return GIVE_UP;
            p += n;
            continue;
        }
        /* a backslash */
        esc = 1;
        if (p + 1 >= end) return GIVE_UP;
        c = p[1];
        if (c == 'u') {
            unsigned u;
            if (read_hex4(p + 2, end, &u)) return GIVE_UP;
            p += 6;
            if (u >= 0xDC00 && u <= 0xDFFF) return GIVE_UP;
            if (u >= 0xD800 && u <= 0xDBFF) {
                unsigned l;
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || read_hex4(p + 2, end, &l)) return GIVE_UP;
                if (l < 0xDC00 || l > 0xDFFF) return GIVE_UP;
                p += 6;
            }
        } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
            p += 2;
        } else {
            return GIVE_UP;
        }
    }
    P->p = p + 1;
    if (escaped) *escaped = esc;
    if (!out) return 0;
    if (!esc) {
        *out = (Str){(const char *)begin, (size_t)(p - begin)};
        return 0;
    }
    /* unescape (the text was validated above) */
    char *o = arena_alloc(&P->arena, (size_t)(p - begin));
    if (!o) return NO_MEMORY;
    char *o0 = o;
    for (const unsigned char *q = begin; q < p;) {
        if (*q != '\\') {
            *o++ = (char)*q++;
            continue;
        }
        unsigned c2 = q[1];
        q += 2;
        switch (c2) {
            case 'b': *o++ = '\b'; break;
            case 'f': *o++ = '\f'; break;
            case 'n': *o++ = '\n'; break;
            case 'r': *o++ = '\r'; break;
            case 't': *o++ = '\t'; break;
            case 'u': {
                unsigned u = 0, l = 0;
                read_hex4(q, p, &u);
                q += 4;
                if (u >= 0xD800 && u <= 0xDBFF) {
                    read_hex4(q + 2, p, &l);
                    q += 6;
                    u = 0x10000 + ((u - 0xD800) << 10) + (l - 0xDC00);
                }
                o += put_utf8(o, u);
                break;
            }
            default: *o++ = (char)c2; break; /* " \ / */
        }
    }
    *out = (Str){o0, (size_t)(o - o0)};
    return 0;
}

/* A JSON number at P->p (strict grammar). Sets v: V_INT with its value when it is an integer
 * that fits int64, V_BIG for a larger integer, V_FLOAT otherwise; b/e: its text. */
static int read_number(Parser *P, Val *v) {
    const unsigned char *p = P->p, *end = P->end, *b = p;
    int neg = 0, is_int = 1, ovf = 0;
    uint64_t m = 0;
    if (p < end && *p == '-') neg = 1, p++;
    if (UNLIKELY(p >= end)) return GIVE_UP;
    if (*p == '0') {
        p++;
    } else if (LIKELY(*p >= '1' && *p <= '9')) {
        const unsigned char *d = p;
        /* up to 19 digits never overflow 64 bits; 20 or more (no leading zero) are >= 10^19,
           above INT64_MAX: V_BIG whatever m holds (unsigned: it wraps) */
        while (p < end && (unsigned)(*p - '0') < 10) m = m * 10 + (unsigned)(*p++ - '0');
        ovf = p - d > 19;
    } else {
        return GIVE_UP;
    }
    if (p < end && *p == '.') {
        is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return GIVE_UP;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return GIVE_UP;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    P->p = p;
    v->b = b;
    v->e = p;
    if (!is_int) {
        v->type = V_FLOAT;
    } else if (ovf || (!neg && m > (uint64_t)INT64_MAX) || (neg && m > (uint64_t)INT64_MAX + 1)) {
        v->type = V_BIG;
    } else {
        v->type = V_INT;
        v->i = neg ? (int64_t)(0 - m) : (int64_t)m;
    }
    return 0;
}

static int skip_value(Parser *P, int depth);

static int skip_container(Parser *P, int depth, unsigned char close) {
    if (depth > 64) return GIVE_UP; /* far deeper than any trace: let the reference judge */
    P->p++;
    skip_ws(P);
    if (P->p < P->end && *P->p == close) {
        P->p++;
        return 0;
    }
    for (;;) {
        int r;
        if (close == '}') {
            if (P->p >= P->end || *P->p != '"') return GIVE_UP;
            if ((r = read_string(P, NULL, NULL))) return r;
            skip_ws(P);
            if (P->p >= P->end || *P->p != ':') return GIVE_UP;
            P->p++;
            skip_ws(P);
        }
        if ((r = skip_value(P, depth + 1))) return r;
        skip_ws(P);
        if (P->p >= P->end) return GIVE_UP;
        if (*P->p == ',') {
            P->p++;
            skip_ws(P);
            continue;
        }
        if (*P->p == close) {
            P->p++;
            return 0;
        }
        return GIVE_UP;
    }
}

static int literal(Parser *P, const char *word, size_t n) {
    if ((size_t)(P->end - P->p) < n || memcmp(P->p, word, n) != 0) return GIVE_UP;
    P->p += n;
    return 0;
}

/* skip the value at P->p (no blanks before it) */
static int skip_value(Parser *P, int depth) {
    if (P->p >= P->end) return GIVE_UP;
    switch (*P->p) {
        case '{': return skip_container(P, depth, '}');
        case '[': return skip_container(P, depth, ']');
        case '"': return read_string(P, NULL, NULL);
        case 't': return literal(P, "true", 4);
        case 'f': return literal(P, "false", 5);
        case 'n': return literal(P, "null", 4);
        default: {
            Val v;
            return read_number(P, &v);
        }
    }
}

/* read a scalar value into v (strings unescaped); objects and arrays are skipped: V_OTHER */
static int read_value(Parser *P, Val *v, int depth) {
    if (P->p >= P->end) return GIVE_UP;
    unsigned c = *P->p;
    v->b = P->p;
    if (c == '"') {
        v->type = V_STR;
        return read_string(P, &v->s, NULL);
    }
    if (c == 'n') {
        v->type = V_NULL;
        return literal(P, "null", 4);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return read_number(P, v);
    v->type = V_OTHER;
    int r = skip_value(P, depth);
    v->e = P->p;
    return r;
}

/* a key (on its opening quote) -> its text; escaped keys: give up (the reference compares
 * unescaped names) */
static inline int read_key(Parser *P, Str *k) {
    const unsigned char *p = P->p + 1, *end = P->end, *b = p;
    /* the usual key: printable ASCII without a backslash */
    p = scan_plain(p, end);
    if (LIKELY(p < end && *p == '"')) {
        *k = (Str){(const char *)b, (size_t)(p - b)};
        p++;
    } else {
        int esc = 0;
        int r = read_string(P, k, &esc);
        if (r) return r;
        if (esc) return GIVE_UP;
        p = P->p;
    }
    if (LIKELY(p < end && *p == ':')) {
        p++;
    } else {
        P->p = p;
        skip_ws(P);
        if (P->p >= P->end || *P->p != ':') return GIVE_UP;
        p = P->p + 1;
    }
    if (p < end && *p == ' ') p++;
    P->p = p;
    if (UNLIKELY(p < end && IS_WS[*p])) skip_ws(P);
    return 0;
}

#define KEY_IS(k, lit) ((k).len == sizeof(lit) - 1 && memcmp((k).p, lit, sizeof(lit) - 1) == 0)

enum {
    A_EXTERNAL_ID, A_EXTERNAL_ID_LOWER, A_CORRELATION, A_STREAM, A_DEVICE, A_SEQUENCE_NUMBER,
    A_FWD_THREAD_ID, A_BYTES, A_COLLECTIVE_NAME, A_IN_NELEMS, A_OUT_NELEMS, A_GROUP_SIZE, A_DTYPE,
    A_PG_NAME, A_PG_DESC, A_PG_RANKS, A_SEQ, A_SRC_RANK, A_DST_RANK
};

/* the index of an args key (ARGS, A_DIMS, A_TYPES), -1 for the others: by length, then the text
 * (checked against ARGS when the module loads) */
static int arg_index(Str k) {
    switch (k.len) {
        case 3: return KEY_IS(k, "Seq") ? A_SEQ : -1;
        case 5:
            if (KEY_IS(k, "bytes")) return A_BYTES;
            if (KEY_IS(k, "dtype")) return A_DTYPE;
            return -1;
        case 6:
            if (KEY_IS(k, "stream")) return A_STREAM;
            if (KEY_IS(k, "device")) return A_DEVICE;
            return -1;
        case 8:
            if (KEY_IS(k, "Src Rank")) return A_SRC_RANK;
            if (KEY_IS(k, "Dst Rank")) return A_DST_RANK;
            return -1;
        case 10:
            if (KEY_IS(k, "Input Dims")) return A_DIMS;
            if (KEY_IS(k, "Input type")) return A_TYPES;
            if (KEY_IS(k, "Group size")) return A_GROUP_SIZE;
            return -1;
        case 11:
            if (KEY_IS(k, "External id")) return A_EXTERNAL_ID;
            if (KEY_IS(k, "correlation")) return A_CORRELATION;
            if (KEY_IS(k, "external id")) return A_EXTERNAL_ID_LOWER;
            return -1;
        case 13:
            if (KEY_IS(k, "Fwd thread id")) return A_FWD_THREAD_ID;
            if (KEY_IS(k, "In msg nelems")) return A_IN_NELEMS;
            return -1;
        case 14: return KEY_IS(k, "Out msg nelems") ? A_OUT_NELEMS : -1;
        case 15:
            if (KEY_IS(k, "Sequence number")) return A_SEQUENCE_NUMBER;
            if (KEY_IS(k, "Collective name")) return A_COLLECTIVE_NAME;
            return -1;
        case 18: return KEY_IS(k, "Process Group Name") ? A_PG_NAME : -1;
        case 19: return KEY_IS(k, "Process Group Ranks") ? A_PG_RANKS : -1;
        case 25: return KEY_IS(k, "Process Group Description") ? A_PG_DESC : -1;
        default: return -1;
    }
}

/* the args object at P->p into a[]: a[i] is set where bit i of *seen is (nothing is read from
 * the others) */
static int read_args(Parser *P, Val *a, uint32_t *seen) {
    P->p++;
    skip_ws(P);
    if (P->p < P->end && *P->p == '}') {
        P->p++;
        return 0;
    }
    for (;;) {
        int r;
        Str k;
        if (UNLIKELY(P->p >= P->end || *P->p != '"')) return GIVE_UP;
        if ((r = read_key(P, &k))) return r;
        int i = arg_index(k);
        if (i < 0) {
            if ((r = skip_value(P, 2))) return r;
        } else {
            if (*seen & (1u << i)) return GIVE_UP; /* written twice */
            *seen |= 1u << i;
            if (i == A_DIMS || i == A_TYPES) {
                a[i].type = V_OTHER;
                a[i].b = P->p;
                if ((r = skip_value(P, 2))) return r;
                a[i].e = P->p;
            } else if ((r = read_value(P, &a[i], 2))) {
                return r;
            }
        }
        skip_ws(P);
        if (UNLIKELY(P->p >= P->end)) return GIVE_UP;
        if (*P->p == ',') {
            P->p++;
            skip_ws(P);
            continue;
        }
        if (*P->p == '}') {
            P->p++;
            return 0;
        }
        return GIVE_UP;
    }
}

/* ---- one event ----------------------------------------------------------------------------- */

enum { F_PH, F_CAT, F_NAME, F_PID, F_TID, F_TS, F_DUR, F_ARGS, N_F };

static int field_index(Str k) {
    switch (k.len) {
        case 2:
            if (KEY_IS(k, "ph")) return F_PH;
            if (KEY_IS(k, "ts")) return F_TS;
            return -1;
        case 3:
            if (KEY_IS(k, "cat")) return F_CAT;
            if (KEY_IS(k, "pid")) return F_PID;
            if (KEY_IS(k, "tid")) return F_TID;
            if (KEY_IS(k, "dur")) return F_DUR;
            return -1;
        case 4:
            if (KEY_IS(k, "name")) return F_NAME;
            if (KEY_IS(k, "args")) return F_ARGS;
            return -1;
        default: return -1;
    }
}

/* the event key at P->p (on its opening quote), the colon and the blanks after it: its F_ index,
 * N_F for another key, or the error (GIVE_UP, NO_MEMORY: negative). The keys we keep, written plainly, are recognized by their
 * quoted text ("ph" then a quote is the key ph, as read_key would read it); others are read. */
static inline int event_key(Parser *P) {
    const unsigned char *p = P->p;
    int i = -1;
    size_t n = 0;
    if (LIKELY(P->end - p >= 8)) {
#define QUOTED(lit, f) (memcmp(p, "\"" lit "\"", sizeof(lit) + 1) == 0 ? (i = (f), n = sizeof(lit) + 1) : 0)
        switch (p[1]) {
            case 'p': QUOTED("ph", F_PH) || QUOTED("pid", F_PID); break;
            case 't': QUOTED("ts", F_TS) || QUOTED("tid", F_TID); break;
            case 'c': QUOTED("cat", F_CAT); break;
            case 'n': QUOTED("name", F_NAME); break;
            case 'd': QUOTED("dur", F_DUR); break;
            case 'a': QUOTED("args", F_ARGS); break;
            default: break;
        }
#undef QUOTED
    }
    if (i < 0) {
        Str k;
        int r = read_key(P, &k);
        if (r) return r;
        int fi = field_index(k);
        return fi < 0 ? N_F : fi;
    }
    /* the colon and the blanks, as read_key takes them */
    p += n;
    const unsigned char *end = P->end;
    if (LIKELY(p < end && *p == ':')) {
        p++;
    } else {
        P->p = p;
        skip_ws(P);
        if (P->p >= P->end || *P->p != ':') return GIVE_UP;
        p = P->p + 1;
    }
    if (p < end && *p == ' ') p++;
    P->p = p;
    if (UNLIKELY(p < end && IS_WS[*p])) skip_ws(P);
    return i;
}

/* the phases of kineto_events.OTHER_PHASES: decoded as nothing, only counted */
static int other_phase(Str s) {
    static const char *const OTHER = "iICbneSTpFstfPNODMVvRc()";
    return s.len == 1 && s.p[0] != 0 && strchr(OTHER, s.p[0]) != NULL;
}

static size_t elem_size(const Col *c) { return c->kind == K_STR ? sizeof(int32_t) : sizeof(int64_t); }

/* room for one more row in every column (grown geometrically, all at once) */
static int reserve_row(Parser *P) {
    if (LIKELY(P->n_rows < P->cap_rows)) return 0;
    int64_t cap = P->cap_rows ? P->cap_rows * 2 : 4096;
    for (int i = 0; i < N_COLS; i++) {
        Col *c = &P->cols[i];
        if (c->sparse) continue;
        char *d = realloc(c->data.p, (size_t)cap * elem_size(c));
        if (!d) return NO_MEMORY;
        c->data.p = d;
        c->data.cap = (size_t)cap * elem_size(c);
        char *v = realloc(c->valid.p, (size_t)cap / 8); /* cap: a multiple of 8 */
        if (!v) return NO_MEMORY;
        memset(v + P->cap_rows / 8, 0, (size_t)(cap - P->cap_rows) / 8);
        c->valid.p = v;
        c->valid.cap = (size_t)cap / 8;
    }
    P->cap_rows = cap;
    return 0;
}

/* the stores of the current row (P->n_rows - 1), room reserved */
static inline void push_i64(Parser *P, Col *c, int64_t v, int ok) {
    int64_t row = P->n_rows - 1;
    ((int64_t *)(void *)c->data.p)[row] = ok ? v : 0;
    c->valid.p[row >> 3] |= (char)((unsigned)ok << (row & 7));
    c->nulls += !ok;
}

static inline void push_f64(Parser *P, Col *c, double v, int ok) {
    int64_t row = P->n_rows - 1;
    ((double *)(void *)c->data.p)[row] = ok ? v : 0.0;
    c->valid.p[row >> 3] |= (char)((unsigned)ok << (row & 7));
    c->nulls += !ok;
}

/* a value of a sparse column in the current row (a null is nothing) */
static inline int put_i64(Parser *P, Col *c, int64_t v) {
    if (UNLIKELY(buf_grow(&c->rows, sizeof(int64_t)) || buf_grow(&c->data, sizeof(int64_t)))) return NO_MEMORY;
    int64_t row = P->n_rows - 1;
    memcpy(c->rows.p + c->rows.len, &row, sizeof(int64_t));
    memcpy(c->data.p + c->data.len, &v, sizeof(int64_t));
    c->rows.len += sizeof(int64_t);
    c->data.len += sizeof(int64_t);
    return 0;
}

static inline int put_id(Parser *P, Col *c, int32_t id) {
    if (UNLIKELY(buf_grow(&c->rows, sizeof(int64_t)) || buf_grow(&c->data, sizeof(int32_t)))) return NO_MEMORY;
    int64_t row = P->n_rows - 1;
    memcpy(c->rows.p + c->rows.len, &row, sizeof(int64_t));
    memcpy(c->data.p + c->data.len, &id, sizeof(int32_t));
    c->rows.len += sizeof(int64_t);
    c->data.len += sizeof(int32_t);
    return 0;
}

static inline void push_id(Parser *P, Col *c, int32_t id) {
    int64_t row = P->n_rows - 1;
    ((int32_t *)(void *)c->data.p)[row] = id;
    c->valid.p[row >> 3] |= (char)((unsigned)(id >= 0) << (row & 7));
    c->nulls += id < 0;
}

static int intern(Parser *P, Str s, int32_t *id) {
    int32_t i = dict_intern(&P->dict, s.p, s.len);
    if (i < 0) return NO_MEMORY;
    *id = i;
    return 0;
}

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The double of a number's text when it is certainly the correctly rounded one (Clinger's fast
 * path: a significand below 2^53 and a power of ten up to 22, both exact doubles, one rounding);
 * 0 when the text needs the general conversion. */
static int fast_double(const unsigned char *b, const unsigned char *e, double *out) {
    const unsigned char *p = b;
    int neg = 0;
    uint64_t m = 0;
    int digits = 0, exp10 = 0;
    if (*p == '-') neg = 1, p++;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (m || *p != '0') digits++;
        m = m * 10 + (unsigned)(*p - '0');
        if (digits > 15) return 0;
    }
    if (p < e && *p == '.') {
        for (p++; p < e && *p >= '0' && *p <= '9'; p++) {
            if (m || *p != '0') digits++;
            m = m * 10 + (unsigned)(*p - '0');
            exp10--;
            if (digits > 15) return 0;
        }
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0, x = 0;
        if (*p == '+' || *p == '-') eneg = *p == '-', p++;
        for (; p < e; p++) {
            if (x > 10000) return 0;
            x = x * 10 + (*p - '0');
        }
        exp10 += eneg ? -x : x;
    }
    if (exp10 < -22 || exp10 > 22) return 0;
    double d = (double)m; /* m < 10^15 < 2^53: exact */
    d = exp10 < 0 ? d / POW10[-exp10] : d * POW10[exp10];
    *out = neg ? -d : d;
    return 1;
}

/* ts / dur: float | None in the typed decoder (JSON integers become doubles) */
static int push_time(Parser *P, int col, const Val *v) {
    Col *c = &P->cols[col];
    switch (v->type) {
        case V_ABSENT:
        case V_NULL: push_f64(P, c, 0, 0); return 0;
        case V_INT: push_f64(P, c, (double)v->i, 1); return 0; /* correctly rounded conversion */
        case V_FLOAT:
        case V_BIG: {
            double d;
            if (v->type == V_FLOAT && fast_double(v->b, v->e, &d)) {
                push_f64(P, c, d, 1);
                return 0;
            }
            Slow s = {col, P->n_rows - 1, v->b, v->e}; /* this row, counted already */
            if (buf_grow(&P->slow, sizeof(Slow))) return NO_MEMORY;
            memcpy(P->slow.p + P->slow.len, &s, sizeof(Slow));
            P->slow.len += sizeof(Slow);
            push_f64(P, c, 0, 1);
            return 0;
        }
        default: return GIVE_UP;
    }
}

/* a string's dictionary id, through the column's cache of the last one */
static inline int intern_col(Parser *P, Col *c, Str s, int32_t *id) {
    int32_t last = c->last_id;
    if (last >= 0) {
        const Str *e = &P->dict.entries[last];
        if (e->len == s.len && memcmp(e->p, s.p, s.len) == 0) {
            *id = last;
            return 0;
        }
    }
    int r = intern(P, s, id);
    if (!r) c->last_id = *id;
    return r;
}

/* pid / tid: int64 | str, missing: "" (as text) */
static int push_ident(Parser *P, int col, const Val *v) {
    Col *c = &P->cols[col];
    int32_t id;
    int r;
    char tmp[24];
    switch (v->type) {
        case V_ABSENT: push_id(P, c, P->id_empty); return 0;
        case V_STR:
            if ((r = intern_col(P, c, v->s, &id))) return r;
            push_id(P, c, id);
            return 0;
        case V_INT: {
            if (c->int_id >= 0 && c->int_val == v->i) { /* the same number as the last one */
                push_id(P, c, c->int_id);
                return 0;
            }
            /* decimal text, as polars casts an Int64 to String and str() writes an int */
            uint64_t u = v->i < 0 ? (uint64_t)0 - (uint64_t)v->i : (uint64_t)v->i;
            size_t n = 0;
            char rev[24];
            do {
                rev[n++] = (char)('0' + u % 10);
                u /= 10;
            } while (u);
            size_t k = 0;
            if (v->i < 0) tmp[k++] = '-';
            while (n) tmp[k++] = rev[--n];
            /* the dictionary keeps pointers: a new text is copied where it stays */
            size_t before = P->dict.n;
            if ((r = intern(P, (Str){tmp, k}, &id))) return r;
            if (P->dict.n != before) {
                char *stable = arena_alloc(&P->arena, k);
                if (!stable) return NO_MEMORY;
                memcpy(stable, tmp, k);
                P->dict.entries[id].p = stable;
            }
            c->int_id = id;
            c->int_val = v->i;
            push_id(P, c, id);
            return 0;
        }
        default: return GIVE_UP;
    }
}

/* an integer arg: int64 | str | None; a string is cast as polars casts text to Int64 (digits
 * with an optional sign: the number; text with other characters: null); anything in between
 * (a bare sign, an out-of-range number, a float): the reference decides */
static int push_int_arg(Parser *P, int col, const Val *v) {
    Col *c = &P->cols[col]; /* sparse: nothing for a null */
    switch (v->type) {
        case V_ABSENT:
        case V_NULL: return 0;
        case V_INT: return put_i64(P, c, v->i);
        case V_STR: {
            const char *s = v->s.p;
            size_t n = v->s.len;
            for (size_t k = 0; k < n; k++) {
                char ch = s[k];
                if (!((ch >= '0' && ch <= '9') || ch == '+' || ch == '-')) return 0;
            }
            if (n == 0) return 0;
            size_t k = 0;
            int neg = 0;
            if (s[0] == '+' || s[0] == '-') neg = s[0] == '-', k = 1;
            if (k == n || n - k > 18) return GIVE_UP;
            int64_t x = 0;
            for (; k < n; k++) {
                if (s[k] < '0' || s[k] > '9') return GIVE_UP;
                x = x * 10 + (s[k] - '0');
            }
            return put_i64(P, c, neg ? -x : x);
        }
        default: return GIVE_UP;
    }
}

/* cat, name (dense) and the string args (sparse) */
static int push_str_arg(Parser *P, int col, const Val *v) {
    Col *c = &P->cols[col];
    int32_t id;
    int r;
    switch (v->type) {
        case V_ABSENT:
        case V_NULL:
            if (!c->sparse) push_id(P, c, -1);
            return 0;
        case V_STR:
            if ((r = intern_col(P, c, v->s, &id))) return r;
            if (c->sparse) return put_id(P, c, id);
            push_id(P, c, id);
            return 0;
        default: return GIVE_UP;
    }
}

static const Val ABSENT; /* V_ABSENT */

/* the event object at P->p */
static int read_event(Parser *P) {
    Val f[N_F];        /* f[i]: set where bit i of seen_f is */
    Val a[N_ARGS + 2]; /* a[i]: set where bit i of seen_a is */
    uint32_t seen_f = 0, seen_a = 0;
    int have_args = 0;
    int r;
    if (UNLIKELY(P->p >= P->end || *P->p != '{')) return GIVE_UP; /* not an object */
    P->p++;
    skip_ws(P);
    if (UNLIKELY(P->p < P->end && *P->p == '}')) return GIVE_UP; /* no "ph" */
    for (;;) {
        if (UNLIKELY(P->p >= P->end || *P->p != '"')) return GIVE_UP;
        int i = event_key(P);
        if (i < 0) return i;
        if (i == N_F) {
            if ((r = skip_value(P, 1))) return r;
        } else {
            if (seen_f & (1u << i)) return GIVE_UP; /* written twice */
            seen_f |= 1u << i;
            if (i == F_ARGS) {
                if (P->p < P->end && *P->p == '{') {
                    f[i].type = V_OTHER;
                    have_args = 1;
                    if ((r = read_args(P, a, &seen_a))) return r;
                } else if ((r = read_value(P, &f[i], 1))) {
                    return r;
                }
            } else if ((r = read_value(P, &f[i], 1))) {
                return r;
            }
        }
        skip_ws(P);
        if (UNLIKELY(P->p >= P->end)) return GIVE_UP;
        if (LIKELY(*P->p == ',')) {
            P->p++;
            skip_ws(P);
            continue;
        }
        if (*P->p == '}') {
            P->p++;
            break;
        }
        return GIVE_UP;
    }
    int64_t index = P->n_events++;
    /* the phase decides: kept (X, x, B, E), counted (the other phases), or the reference */
    if (!(seen_f & (1u << F_PH)) || f[F_PH].type != V_STR) return GIVE_UP;
    Str ph = f[F_PH].s;
    int kept = -1;
    if (ph.len == 1) {
        char c = ph.p[0];
        /* 'x' (a complete event written lower-case) goes to the Python decoder, which says so */
        kept = c == 'X' ? 0 : c == 'B' ? 1 : c == 'E' ? 2 : -1;
    }
    if (kept < 0) return other_phase(ph) ? 0 : GIVE_UP;
    if ((seen_f & (1u << F_ARGS)) && !have_args) return GIVE_UP; /* args not an object */
    if ((r = reserve_row(P))) return r;
    P->n_rows++;
#define FIELD(i) ((seen_f & (1u << (i))) ? &f[i] : &ABSENT)
    push_i64(P, &P->cols[C_ROW], index, 1);
    push_id(P, &P->cols[C_PH], P->id_ph[kept]);
    if ((r = push_str_arg(P, C_CAT, FIELD(F_CAT)))) return r;
    if ((r = push_str_arg(P, C_NAME, FIELD(F_NAME)))) return r;
    if ((r = push_ident(P, C_PID, FIELD(F_PID)))) return r;
    if ((r = push_ident(P, C_TID, FIELD(F_TID)))) return r;
    if ((r = push_time(P, C_TS, FIELD(F_TS)))) return r;
    if ((r = push_time(P, C_DUR, FIELD(F_DUR)))) return r;
#undef FIELD
    for (int i = 0; i < N_ARGS; i++) {
        if (!(seen_a & (1u << i))) continue; /* missing: null (nothing in a sparse column) */
        r = ARGS[i].integer ? push_int_arg(P, C_ARG0 + i, &a[i]) : push_str_arg(P, C_ARG0 + i, &a[i]);
        if (r) return r;
    }
    if ((seen_a >> A_DIMS) & 1) {
        if ((r = put_i64(P, &P->cols[C_DIMS_OFF], a[A_DIMS].b - P->start))) return r;
        if ((r = put_i64(P, &P->cols[C_DIMS_LEN], a[A_DIMS].e - a[A_DIMS].b))) return r;
    }
    if ((seen_a >> A_TYPES) & 1) {
        if ((r = put_i64(P, &P->cols[C_TYPES_OFF], a[A_TYPES].b - P->start))) return r;
        if ((r = put_i64(P, &P->cols[C_TYPES_LEN], a[A_TYPES].e - a[A_TYPES].b))) return r;
    }
    return 0;
}

static int parse_array(Parser *P) {
    skip_ws(P);
    if (P->p >= P->end || *P->p != '[') return GIVE_UP;
    P->p++;
    skip_ws(P);
    if (P->p < P->end && *P->p == ']') {
        P->p++;
    } else {
        for (;;) {
            int r = read_event(P);
            if (r) return r;
            skip_ws(P);
            if (P->p >= P->end) return GIVE_UP;
            if (*P->p == ',') {
                P->p++;
                skip_ws(P);
                continue;
            }
            if (*P->p == ']') {
                P->p++;
                break;
            }
            return GIVE_UP;
        }
    }
    skip_ws(P);
    return P->p == P->end ? 0 : GIVE_UP;
}

/* ---- Arrow export ------------------------------------------------------------------------- */

typedef struct {
    void *bufs[4];
    const void *ptrs[4];
} ArrayPrivate;

static void release_array(struct ArrowArray *a) {
    ArrayPrivate *pv = a->private_data;
    if (pv) {
        for (int i = 0; i < 4; i++) free(pv->bufs[i]);
        free(pv);
    }
    a->private_data = NULL;
    a->release = NULL;
}

static void release_schema(struct ArrowSchema *s) { s->release = NULL; }

static void schema_capsule_free(PyObject *cap) {
    struct ArrowSchema *s = PyCapsule_GetPointer(cap, "arrow_schema");
    if (s) {
        if (s->release) s->release(s);
        free(s);
    }
}

static void array_capsule_free(PyObject *cap) {
    struct ArrowArray *a = PyCapsule_GetPointer(cap, "arrow_array");
    if (a) {
        if (a->release) a->release(a);
        free(a);
    }
}

/* the column's validity bitmap, taken (NULL when there is no null; *fail: out of memory) */
static void *bitmap(Col *c, int64_t n, int *fail) {
    if (c->sparse) c->nulls = n - (int64_t)(c->rows.len / sizeof(int64_t));
    if (!c->nulls) return NULL;
    if (c->sparse) {
        uint8_t *bm = calloc((size_t)(n + 7) / 8 + 1, 1);
        if (!bm) {
            *fail = 1;
            return NULL;
        }
        const int64_t *rows = (const int64_t *)(void *)c->rows.p;
        for (size_t k = 0; k < c->rows.len / sizeof(int64_t); k++) bm[rows[k] >> 3] |= (uint8_t)(1u << (rows[k] & 7));
        return bm;
    }
    void *bm = c->valid.p;
    c->valid.p = NULL;
    c->valid.len = c->valid.cap = 0;
    return bm;
}

/* one column as a (schema capsule, array capsule) pair; takes its buffers */
static PyObject *export_col(Parser *P, Col *c) {
    int64_t n = P->n_rows;
    ArrayPrivate *pv = calloc(1, sizeof(ArrayPrivate));
    struct ArrowArray *arr = calloc(1, sizeof(struct ArrowArray));
    struct ArrowSchema *sch = calloc(1, sizeof(struct ArrowSchema));
    PyObject *cs = NULL, *ca = NULL;
    if (!pv || !arr || !sch) goto nomem;
    int fail = 0;
    pv->bufs[0] = bitmap(c, n, &fail);
    if (fail) goto nomem;
    int nbuf = 2;
    const char *fmt;
    if (c->kind == K_STR) {
        /* utf8 views (polars' own string layout, taken without a copy): a string of up to 12
         * bytes sits in its 16-byte view; a longer one is in the data buffer once per column
         * (dictionary-encoded: every row naming it points at the same bytes) */
        /* (row, id) pairs: every row of a dense column, the rows with a value of a sparse one */
        const int32_t *ids = (const int32_t *)(void *)c->data.p;
        const int64_t *rows = c->sparse ? (const int64_t *)(void *)c->rows.p : NULL;
        int64_t count = c->sparse ? (int64_t)(c->rows.len / sizeof(int64_t)) : n;
        int64_t *at = malloc((P->dict.n ? P->dict.n : 1) * sizeof(int64_t));
        uint8_t *views = calloc((size_t)(n ? n : 1), 16);
        Buf data = {0};
        int64_t *sizes = malloc(sizeof(int64_t));
        pv->bufs[1] = views;
        pv->bufs[3] = sizes;
        if (!at || !views || !sizes) {
            free(at);
            goto nomem;
        }
        memset(at, 0xff, (P->dict.n ? P->dict.n : 1) * sizeof(int64_t));
        for (int64_t k = 0; k < count; k++) {
            int64_t i = rows ? rows[k] : k;
            int32_t id = ids[k];
            if (id < 0) continue;
            const Str *s = &P->dict.entries[id];
            uint8_t *v = views + 16 * i;
            int32_t len = (int32_t)s->len;
            memcpy(v, &len, 4);
            if (s->len <= 12) {
                memcpy(v + 4, s->p, s->len);
                continue;
            }
            if (at[id] < 0) {
                if (buf_grow(&data, s->len)) { /* below 2 GiB: checked by decode() */
                    free(at);
                    free(data.p);
                    goto nomem;
                }
                at[id] = (int64_t)data.len;
                memcpy(data.p + data.len, s->p, s->len);
                data.len += s->len;
            }
            int32_t buf_index = 0, off = (int32_t)at[id];
            memcpy(v + 4, s->p, 4);
            memcpy(v + 8, &buf_index, 4);
            memcpy(v + 12, &off, 4);
        }
        free(at);
        pv->bufs[2] = data.p ? data.p : malloc(1);
        if (!pv->bufs[2]) goto nomem;
        sizes[0] = (int64_t)data.len;
        nbuf = 4;
        fmt = "vu";
    } else if (c->sparse) {
        /* zeroed (fresh pages where it is large: those of rows without a value stay untouched),
           the values scattered */
        int64_t *dense = calloc((size_t)(n ? n : 1), sizeof(int64_t));
        if (!dense) goto nomem;
        const int64_t *rows = (const int64_t *)(void *)c->rows.p;
        const int64_t *vals = (const int64_t *)(void *)c->data.p;
        for (size_t k = 0; k < c->rows.len / sizeof(int64_t); k++) dense[rows[k]] = vals[k];
        pv->bufs[1] = dense;
        fmt = "l";
    } else {
        /* the frame keeps this buffer: without the slack of its doubling growth (up to half) */
        c->data.len = (size_t)n * elem_size(c);
        if (c->data.p && c->data.cap > c->data.len && c->data.len) {
            char *p = realloc(c->data.p, c->data.len);
            if (p) c->data.p = p;
        }
        pv->bufs[1] = c->data.p ? c->data.p : malloc(8);
        if (!pv->bufs[1]) goto nomem;
        c->data.p = NULL;
        c->data.len = c->data.cap = 0;
        fmt = c->kind == K_I64 ? "l" : "g";
    }
    for (int i = 0; i < 4; i++) pv->ptrs[i] = pv->bufs[i];
    arr->length = n;
    arr->null_count = c->nulls;
    arr->offset = 0;
    arr->n_buffers = nbuf;
    arr->n_children = 0;
    arr->buffers = pv->ptrs;
    arr->release = release_array;
    arr->private_data = pv;
    pv = NULL;
    sch->format = fmt;
    sch->name = c->name;
    sch->flags = ARROW_FLAG_NULLABLE;
    sch->release = release_schema;
    cs = PyCapsule_New(sch, "arrow_schema", schema_capsule_free);
    if (!cs) {
        free(sch);
        release_array(arr);
        free(arr);
        return NULL;
    }
    ca = PyCapsule_New(arr, "arrow_array", array_capsule_free);
    if (!ca) {
        Py_DECREF(cs);
        release_array(arr);
        free(arr);
        return NULL;
    }
    PyObject *t = PyTuple_Pack(2, cs, ca);
    Py_DECREF(cs);
    Py_DECREF(ca);
    return t;
nomem:
    if (pv) {
        for (int i = 0; i < 4; i++) free(pv->bufs[i]);
        free(pv);
    }
    free(arr);
    free(sch);
    PyErr_NoMemory();
    return NULL;
}

static const char *const COL_NAMES[C_ARG0] = {"row", "ph", "cat", "name", "pid", "tid", "ts", "dur"};

static void parser_free(Parser *P) {
    for (int i = 0; i < N_COLS; i++) {
        free(P->cols[i].data.p);
        free(P->cols[i].valid.p);
        free(P->cols[i].rows.p);
    }
    free(P->slow.p);
    dict_free(&P->dict);
    arena_free(&P->arena);
}

static PyObject *decode(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Parser P;
    memset(&P, 0, sizeof(P));
    P.start = P.p = view.buf;
    P.end = P.start + view.len;
    for (int i = 0; i < N_COLS; i++) {
        Col *c = &P.cols[i];
        c->last_id = c->int_id = -1;
        c->sparse = i >= C_ARG0;
        if (i < C_ARG0) {
            c->name = COL_NAMES[i];
            c->kind = i == C_ROW ? K_I64 : (i == C_TS || i == C_DUR) ? K_F64 : K_STR;
        } else if (i < C_DIMS_OFF) {
            c->name = ARGS[i - C_ARG0].key;
            c->kind = ARGS[i - C_ARG0].integer ? K_I64 : K_STR;
        } else {
            c->name = i == C_DIMS_OFF ? "dims_offset" : i == C_DIMS_LEN ? "dims_length"
                    : i == C_TYPES_OFF ? "types_offset" : "types_length";
            c->kind = K_I64;
        }
    }
    PyObject *result = NULL;
    int r = 0;
    if (intern(&P, (Str){"", 0}, &P.id_empty) || intern(&P, (Str){"X", 1}, &P.id_ph[0]) ||
        intern(&P, (Str){"B", 1}, &P.id_ph[1]) || intern(&P, (Str){"E", 1}, &P.id_ph[2])) {
        r = NO_MEMORY;
    } else {
        Py_BEGIN_ALLOW_THREADS r = parse_array(&P);
        Py_END_ALLOW_THREADS
    }
    if (r == NO_MEMORY) {
        PyErr_NoMemory();
        goto done;
    }
    if (r == GIVE_UP) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    /* the numbers the fast paths left: Python's correctly rounded conversion */
    for (size_t k = 0; k < P.slow.len / sizeof(Slow); k++) {
        Slow s;
        memcpy(&s, P.slow.p + k * sizeof(Slow), sizeof(Slow));
        size_t n = (size_t)(s.e - s.b);
        char small[64];
        char *text = n < sizeof(small) ? small : PyMem_Malloc(n + 1);
        if (!text) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(text, s.b, n);
        text[n] = 0;
        double d = PyOS_string_to_double(text, NULL, NULL);
        if (text != small) PyMem_Free(text);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (!isfinite(d)) { /* out of double range: the reference decides */
            result = Py_NewRef(Py_None);
            goto done;
        }
        memcpy(P.cols[s.col].data.p + (size_t)s.row * sizeof(double), &d, sizeof(double));
    }
    /* views address their data with int32 offsets: more than 2 GiB of distinct strings in one
     * piece (never seen in a trace) goes to the Python decoder */
    size_t distinct = 0;
    for (size_t k = 0; k < P.dict.n; k++) distinct += P.dict.entries[k].len;
    if (distinct > INT32_MAX) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *cols = PyTuple_New(N_COLS);
    if (!cols) goto done;
    for (int i = 0; i < N_COLS; i++) {
        PyObject *c = export_col(&P, &P.cols[i]);
        if (!c) {
            Py_DECREF(cols);
            goto done;
        }
        PyTuple_SET_ITEM(cols, i, c);
    }
    result = Py_BuildValue("(NL)", cols, (long long)P.n_events);
done:
    parser_free(&P);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *arg_keys(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *t = PyTuple_New(N_ARGS);
    if (!t) return NULL;
    for (int i = 0; i < N_ARGS; i++) {
        PyObject *s = PyUnicode_FromString(ARGS[i].key);
        if (!s) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

static PyMethodDef METHODS[] = {
    {"decode", decode, METH_O,
     "decode(piece) -> ((schema, array) capsules per column, n_events) | None\n\n"
     "The raw-frame columns of a JSON array of Kineto events: row, ph, cat, name, pid, tid, ts, "
     "dur, the integer and string args, and the span (offset, length) of each event's raw "
     "'Input Dims'. None: the piece holds something this decoder leaves to the reference."},
    {"arg_keys", arg_keys, METH_NOARGS, "The args keys, in the order of the decoded columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_kineto",
    .m_doc = "The compiled Kineto event decoder.",
    .m_size = -1,
    .m_methods = METHODS,
};

PyMODINIT_FUNC PyInit__kineto(void) {
    /* arg_index must know every key of ARGS, at its index */
    for (int i = 0; i < N_ARGS; i++) {
        if (arg_index((Str){ARGS[i].key, strlen(ARGS[i].key)}) != i) {
            PyErr_Format(PyExc_ImportError, "_kineto: arg_index does not know %s", ARGS[i].key);
            return NULL;
        }
    }
    if (arg_index((Str){"Input Dims", 10}) != A_DIMS || arg_index((Str){"Input type", 10}) != A_TYPES) {
        PyErr_SetString(PyExc_ImportError, "_kineto: arg_index does not know the input spans");
        return NULL;
    }
    return PyModule_Create(&MODULE);
}
