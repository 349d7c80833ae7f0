/* Whitespace folding in C: `" ".join(text.split())` without a string per word;
 * and the `cosmetic` repeat-key normaliser, pass for pass as in Python.
 *
 * Repeat keys, excerpts and whitespace-insensitive text tests fold every tool
 * call's arguments and results; code and command output are full of newlines and
 * indentation, and splitting them into words only to join them again was a tenth
 * of the engine's time. ASCII text is folded in one pass over its bytes; any
 * other text takes CPython's own split and join, so the result is always exactly
 * `" ".join(text.split())` (tests/engine/test_fold.py checks both paths).
 *
 * `cosmetic` runs on every tool call of the near-identical rules: in Python its
 * dozen substring tests and replaces cost ~5.7 us a call (CPython's search of a
 * two-character needle ending in a space reads every byte), the largest single cost
 * of the engine on tool calls. Here each replace is one pass that starts at the
 * first occurrence (memmem), on ASCII text only (detectors/keys.py sends the rest to
 * Python); tests/engine/test_fold.py checks it against the Python normaliser.
 *
 * `lower_ascii` is `str.lower()` of ASCII text (text.lower sends it only that), eight
 * bytes a step; tests/engine/test_fold.py checks it against str.lower.
 */
#define _GNU_SOURCE 1  /* memmem (as pyconfig.h defines it) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* the ASCII characters str.split() splits on: \t \n \v \f \r, \x1c-\x1f, space */
static const unsigned char WS[256] = {
    ['\t'] = 1, ['\n'] = 1, ['\v'] = 1, ['\f'] = 1, ['\r'] = 1,
    [0x1c] = 1, [0x1d] = 1, [0x1e] = 1, [0x1f] = 1, [' '] = 1,
};

/* SWAR over 8 ASCII bytes (each < 0x80, so no carry crosses a byte): the high bit of
 * each byte below `k` */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
#define BELOW(x, k) (~((x) + (0x80 - (k)) * ONES) & HIGHS)

static inline uint64_t
load8(const unsigned char *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

/* Where the run of ASCII text from `i` that folding leaves as it is ends: at the first
 * control character (whitespace other than the space is one) or the first space
 * followed by whitespace, by a control character or by the end. Eight bytes a step:
 * code and prose are mostly such runs, and a byte at a time was 4 instructions per
 * byte, a tenth of the engine on tool calls. */
static inline Py_ssize_t
regular_run(const unsigned char *s, Py_ssize_t i, Py_ssize_t n)
{
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (i + 9 <= n) {
        uint64_t x = load8(s + i), next = load8(s + i + 1);
        /* a space: below 0x21 and not below 0x20 */
        uint64_t space = BELOW(x, 0x21) & ~BELOW(x, 0x20);
        uint64_t stop = BELOW(x, 0x20) | (space & BELOW(next, 0x21));
        if (stop)
            return i + (__builtin_ctzll(stop) >> 3);
        i += 8;
    }
#endif
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x20 || (c == ' ' && (i + 1 >= n || s[i + 1] <= 0x20)))
            break;
        i++;
    }
    return i;
}

static PyObject *
fold_collapse_ws(PyObject *module, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "collapse_ws() needs str, not %.100s",
                     Py_TYPE(text)->tp_name);
        return NULL;
    }
    if (PyUnicode_READY(text) < 0)
        return NULL;
    if (!PyUnicode_IS_ASCII(text)) {
        PyObject *words = PyUnicode_Split(text, NULL, -1);
        if (words == NULL)
            return NULL;
        PyObject *space = PyUnicode_FromStringAndSize(" ", 1);
        if (space == NULL) {
            Py_DECREF(words);
            return NULL;
        }
        PyObject *out = PyUnicode_Join(space, words);
        Py_DECREF(space);
        Py_DECREF(words);
        return out;
    }
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    /* one pass into a scratch buffer: each run of text that folding leaves alone
     * (words with single spaces between them) copied whole, each gap written as one
     * space */
    unsigned char stack[4096];
    unsigned char *d = n <= (Py_ssize_t)sizeof(stack) ? stack : PyMem_Malloc(n);
    if (d == NULL)
        return PyErr_NoMemory();
    Py_ssize_t j = 0, i = 0;
    int odd = 0;  /* a gap char other than the space */
    while (i < n && WS[s[i]]) {  /* leading whitespace: no trace */
        odd |= s[i] != ' ';
        i++;
    }
    while (i < n) {
        Py_ssize_t run = i;
        i = regular_run(s, i, n);
        memcpy(d + j, s + run, i - run);
        j += i - run;
        if (i >= n)
            break;
        if (!WS[s[i]]) {  /* a control character str.split() keeps in a word */
            d[j++] = s[i++];
            continue;
        }
        while (i < n && WS[s[i]]) {  /* a gap: one space, unless it ends the text */
            odd |= s[i] != ' ';
            i++;
        }
        if (i < n)
            d[j++] = ' ';
    }
    PyObject *out;
    if (j == n && !odd) {  /* nothing to fold: the text itself */
        Py_INCREF(text);
        out = text;
    }
    else if ((out = PyUnicode_New(j, 127)) != NULL) {
        memcpy(PyUnicode_1BYTE_DATA(out), d, j);
    }
    if (d != stack)
        PyMem_Free(d);
    return out;
}

/* One `str.replace(a0 a1, b)` pass in place over d[0:n] (left to right, matches
 * not overlapping, as str.replace): the new length. `b` DELETED replaces with "". */
#define DELETED (-1)

static Py_ssize_t
replace_pair(unsigned char *d, Py_ssize_t n, unsigned char a0, unsigned char a1, int b)
{
    const unsigned char pat[2] = {a0, a1};
    unsigned char *hit = n >= 2 ? memmem(d, n, pat, 2) : NULL;
    if (hit == NULL)
        return n;
    Py_ssize_t i = hit - d, j = i;
    while (i < n) {
        if (i + 1 < n && d[i] == a0 && d[i + 1] == a1) {
            if (b != DELETED)
                d[j++] = (unsigned char)b;
            i += 2;
        }
        else
            d[j++] = d[i++];
    }
    return j;
}

static int
has_pair(const unsigned char *d, Py_ssize_t n, unsigned char a0, unsigned char a1)
{
    const unsigned char pat[2] = {a0, a1};
    return n >= 2 && memmem(d, n, pat, 2) != NULL;
}

/* The quote and end passes of `_cosmetic`, one `str.replace` each, in its order, in
 * place: the new length. Any text. */
static Py_ssize_t
cosmetic_passes(unsigned char *d, Py_ssize_t n)
{
    Py_ssize_t j = n;
    int dq = memchr(d, '"', j) != NULL, sq = memchr(d, '\'', j) != NULL;
    int bq = memchr(d, '`', j) != NULL;
    if (dq) {
        j = replace_pair(d, j, '\\', '"', DELETED);  /* an escaped quote: the agent's */
        /* bare ones are JSON's own: the spaces beside them go too */
        j = replace_pair(d, j, ' ', '"', '"');
        j = replace_pair(d, j, '"', ' ', '"');
    }
    if (dq || sq || bq) {  /* the quotes themselves */
        Py_ssize_t k = 0;
        for (Py_ssize_t i = 0; i < j; i++)
            if (d[i] != '"' && d[i] != '\'' && d[i] != '`')
                d[k++] = d[i];
        j = k;
    }
    /* the end pairs, in order (a pass over text without its first character finds
     * nothing, so no presence test is needed) */
    if (memchr(d, '/', j) != NULL || memchr(d, ';', j) != NULL) {
        j = replace_pair(d, j, '/', ' ', ' ');
        j = replace_pair(d, j, ';', ' ', ' ');
        j = replace_pair(d, j, '/', '}', '}');
        j = replace_pair(d, j, ';', '}', '}');
        j = replace_pair(d, j, '/', ']', ']');
        j = replace_pair(d, j, '/', ',', ',');
    }
    return j;
}

/* the characters the one pass looks at (a slash or semicolon is looked at only
 * from the character after it) */
static const unsigned char COSMETIC[256] = {
    [' '] = 1, ['"'] = 1, ['\''] = 1, ['`'] = 1, ['\\'] = 1,
    ['}'] = 1, [']'] = 1, [','] = 1,
};

#define QUOTE(c) ((c) == '"' || (c) == '\'' || (c) == '`')

/* `cosmetic_passes` in one pass, for text without two spaces side by side (else -1).
 * The quote passes drop an escaped double quote (`\"`), then a space beside a bare
 * one (told from the text without escaped quotes), then the quotes; the end
 * passes, in their order, drop at most a slash then a semicolon that end a run of
 * them before a space or a closing brace, and a slash before a bracket or a comma
 * (judged on what is written, so a quote dropped between them is no obstacle).
 * `*spaces` is set when it writes two spaces side by side. */
static Py_ssize_t
cosmetic_one_pass(const unsigned char *s, Py_ssize_t n, unsigned char *d, int *spaces)
{
    Py_ssize_t j = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (!COSMETIC[c]) {  /* most characters: copied as they are */
            d[j++] = c;
            continue;
        }
        if (c == ' ') {
            if (i + 1 < n && s[i + 1] == ' ')
                return -1;
            /* its neighbours once escaped quotes are gone: beside a bare `"` it goes */
            Py_ssize_t p = i - 1, q = i + 1;
            while (p >= 1 && s[p] == '"' && s[p - 1] == '\\')
                p -= 2;
            while (q + 1 < n && s[q] == '\\' && s[q + 1] == '"')
                q += 2;
            if ((p >= 0 && s[p] == '"') || (q < n && s[q] == '"'))
                continue;
        }
        else if (QUOTE(c) || (c == '\\' && i + 1 < n && s[i + 1] == '"'))
            continue;
        if (c == ' ' || c == '}') {
            if (j > 0 && d[j - 1] == '/')
                j--;
            if (j > 0 && d[j - 1] == ';')
                j--;
        }
        else if ((c == ']' || c == ',') && j > 0 && d[j - 1] == '/')
            j--;
        if (c == ' ' && j > 0 && d[j - 1] == ' ')
            *spaces = 1;  /* ` / `: a slash dropped between two spaces */
        d[j++] = c;
    }
    return j;
}

/* detectors/keys.py `_cosmetic(text, folded)` for ASCII text: whitespace folded
 * first (unless `folded`), escaped quotes, spaces beside bare double quotes, the
 * quotes, the end pairs, trailing
 * slashes and semicolons, and a last fold where dropping a quote left two spaces side
 * by side or one at an end. */
static PyObject *
fold_cosmetic(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "cosmetic() needs (str, bool)");
        return NULL;
    }
    PyObject *text = args[0];
    int folded = PyObject_IsTrue(args[1]);
    if (folded < 0 || PyUnicode_READY(text) < 0)
        return NULL;
    if (!PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_ValueError, "cosmetic() takes ASCII text only");
        return NULL;
    }
    PyObject *src = text;  /* the text read: `text`, or its fold */
    Py_INCREF(src);
    const unsigned char *s = PyUnicode_1BYTE_DATA(src);
    Py_ssize_t n = PyUnicode_GET_LENGTH(src);
    if (!folded && (has_pair(s, n, ' ', ' ') || memchr(s, '\n', n) != NULL
                    || memchr(s, '\t', n) != NULL || (n > 0 && s[0] == ' '))) {
        PyObject *f = fold_collapse_ws(module, src);
        Py_DECREF(src);
        if (f == NULL)
            return NULL;
        src = f;
        s = PyUnicode_1BYTE_DATA(src);
        n = PyUnicode_GET_LENGTH(src);
    }
    unsigned char stack[4096];
    unsigned char *d = n <= (Py_ssize_t)sizeof(stack) ? stack : PyMem_Malloc(n ? n : 1);
    if (d == NULL) {
        Py_DECREF(src);
        return PyErr_NoMemory();
    }
    int spaces = 0;  /* two spaces side by side in what was written */
    Py_ssize_t j = cosmetic_one_pass(s, n, d, &spaces);
    if (j < 0) {  /* a run of spaces: the passes one by one */
        memcpy(d, s, n);
        j = cosmetic_passes(d, n);
        spaces = has_pair(d, j, ' ', ' ');
    }
    while (j > 0 && (d[j - 1] == '/' || d[j - 1] == ';'))
        j--;
    PyObject *out;
    if (j == n) {  /* nothing dropped (every step only drops): the text read itself */
        Py_INCREF(src);
        out = src;
    }
    else if ((out = PyUnicode_New(j, 127)) != NULL)
        memcpy(PyUnicode_1BYTE_DATA(out), d, j);
    if (d != stack)
        PyMem_Free(d);
    Py_DECREF(src);
    if (out != NULL && (spaces || (j > 0 && (PyUnicode_1BYTE_DATA(out)[j - 1] == ' '
                                            || PyUnicode_1BYTE_DATA(out)[0] == ' ')))) {
        PyObject *f = fold_collapse_ws(module, out);
        Py_DECREF(out);
        out = f;
    }
    return out;
}

/* `text.lower()` of ASCII text (any other text: TypeError; callers test isascii()):
 * the text itself when it has no capital letter, eight bytes a step. CPython maps a
 * character at a time, and compiled code got mypyc's per-character loop. */
static PyObject *
fold_lower_ascii(PyObject *module, PyObject *text)
{
    (void)module;
    if (!PyUnicode_Check(text) || PyUnicode_READY(text) < 0 || !PyUnicode_IS_ASCII(text)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "lower_ascii() needs ASCII str");
        return NULL;
    }
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), i = 0;
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; i + 8 <= n; i += 8) {
        uint64_t x = load8(s + i);
        if (BELOW(x, 0x5B) & ~BELOW(x, 0x41))
            break;
    }
#endif
    for (; i < n; i++)
        if (s[i] >= 'A' && s[i] <= 'Z')
            break;
    if (i >= n) {  /* no capital: the text itself, its hash kept */
        Py_INCREF(text);
        return text;
    }
    PyObject *out = PyUnicode_New(n, 127);
    if (out == NULL)
        return NULL;
    unsigned char *d = PyUnicode_1BYTE_DATA(out);
    i -= i % 8;  /* (the step the capital is in) */
    memcpy(d, s, i);
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; i + 8 <= n; i += 8) {
        uint64_t x = load8(s + i);
        x |= (BELOW(x, 0x5B) & ~BELOW(x, 0x41)) >> 2;  /* 0x80 >> 2: 'A' + 0x20 = 'a' */
        memcpy(d + i, &x, 8);
    }
#endif
    for (; i < n; i++)
        d[i] = (s[i] >= 'A' && s[i] <= 'Z') ? s[i] + 0x20 : s[i];
    return out;
}

static PyMethodDef fold_methods[] = {
    {"collapse_ws", fold_collapse_ws, METH_O,
     "collapse_ws(text) -> \" \".join(text.split()), without a string per word."},
    {"cosmetic", (PyCFunction)(void (*)(void))fold_cosmetic, METH_FASTCALL,
     "cosmetic(text, folded) -> the cosmetic repeat-key normaliser, ASCII text only."},
    {"lower_ascii", fold_lower_ascii, METH_O,
     "lower_ascii(text) -> text.lower() of ASCII text (the text itself when unchanged)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fold_module = {
    PyModuleDef_HEAD_INIT, "_fold",
    "Whitespace folding in C for the engine's hot path (see collapse_ws).",
    -1, fold_methods,
};

PyMODINIT_FUNC
PyInit__fold(void)
{
    return PyModule_Create(&fold_module);
}
