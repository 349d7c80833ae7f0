/* Whitespace folding in C: `" ".join(text.split())` without a string per word.
 *
 * Repeat keys, excerpts and whitespace-insensitive text tests fold every tool
 * call's arguments and results; code and command output are full of newlines and
 * indentation, and splitting them into words only to join them again was a tenth
 * of the engine's time. ASCII text is folded in one pass over its bytes; any
 * other text takes CPython's own split and join, so the result is always exactly
 * `" ".join(text.split())` (tests/engine/test_fold.py checks both paths).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

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

static PyMethodDef fold_methods[] = {
    {"collapse_ws", fold_collapse_ws, METH_O,
     "collapse_ws(text) -> \" \".join(text.split()), without a string per word."},
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
