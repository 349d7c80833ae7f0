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
 */
#define _GNU_SOURCE 1  /* memmem (as pyconfig.h defines it) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* the ASCII characters str.split() splits on: \t \n \v \f \r, \x1c-\x1f, space */
static const unsigned char WS[256] = {
    ['\t'] = 1, ['\n'] = 1, ['\v'] = 1, ['\f'] = 1, ['\r'] = 1,
    [0x1c] = 1, [0x1d] = 1, [0x1e] = 1, [0x1f] = 1, [' '] = 1,
};

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
    /* one pass into a scratch buffer: words copied, each gap written as one space */
    unsigned char stack[4096];
    unsigned char *d = n <= (Py_ssize_t)sizeof(stack) ? stack : PyMem_Malloc(n);
    if (d == NULL)
        return PyErr_NoMemory();
    Py_ssize_t j = 0, i = 0;
    int odd = 0;  /* a gap char other than the space */
    while (i < n) {
        while (i < n && WS[s[i]]) {
            odd |= s[i] != ' ';
            i++;
        }
        if (i >= n)
            break;
        if (j)
            d[j++] = ' ';
        while (i < n && !WS[s[i]])
            d[j++] = s[i++];
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

static PyMethodDef fold_methods[] = {
    {"collapse_ws", fold_collapse_ws, METH_O,
     "collapse_ws(text) -> \" \".join(text.split()), without a string per word."},
    {"cosmetic", (PyCFunction)(void (*)(void))fold_cosmetic, METH_FASTCALL,
     "cosmetic(text, folded) -> the cosmetic repeat-key normaliser, ASCII text only."},
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
