/* The record walk of spark/columnar.py in C: follow the size fields of commit-log
 * records through a buffer, checking what needs every byte of a record (its CRC32C) and
 * what chains it to the next (magic, size, stored position), with the GIL released.
 *
 * The layout constants come from the caller (broker_core.record is the one definition
 * of the format); spark/columnar.py's _walk_py is the same function in Python, used
 * when this extension is not built (LMQ_NO_EXTENSIONS=1) and tested equal to it.
 *
 * walk(buffer, pos, end, limit, base, magic, min_size, max_size, max_n)
 *   -> (starts: bytes of native int64, stop: int, full: bool)
 * starts: the offsets of the records that start in [pos, end) before the first one that
 * fails a check or does not fit below limit; stop: the offset after the last one taken
 * (where the caller looks next); full: max_n records were taken.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_SSE42_PATH 1
#endif

/* CRC-32C (Castagnoli), reflected polynomial 0x82F63B78, as the crc32c package computes
 * it: initial value ~0, final complement. */
static uint32_t crc_table[256];
static int use_hw = 0;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
#ifdef HAVE_SSE42_PATH
    __builtin_cpu_init();
    use_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n--)
        c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

#ifdef HAVE_SSE42_PATH
__attribute__((target("sse4.2"))) static uint32_t crc_hw(const uint8_t *p, size_t n)
{
    uint64_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#endif

static uint32_t crc32c(const uint8_t *p, size_t n)
{
#ifdef HAVE_SSE42_PATH
    if (use_hw)
        return crc_hw(p, n);
#endif
    return crc_sw(p, n);
}

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t be64(const uint8_t *p)
{
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

static PyObject *walk(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    long long pos, end, limit, base;
    unsigned long magic;
    long long min_size, max_size;
    Py_ssize_t max_n;
    if (!PyArg_ParseTuple(args, "y*LLLLkLLn", &buf, &pos, &end, &limit, &base, &magic,
                          &min_size, &max_size, &max_n))
        return NULL;
    if (max_n < 0 || pos < 0) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "negative position or count");
        return NULL;
    }
    if (limit > (long long)buf.len)
        limit = (long long)buf.len;
    PyObject *out = PyBytes_FromStringAndSize(NULL, max_n * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    int64_t *starts = (int64_t *)PyBytes_AS_STRING(out);
    const uint8_t *d = (const uint8_t *)buf.buf;
    Py_ssize_t n = 0;
    long long p = pos;
    Py_BEGIN_ALLOW_THREADS
    while (n < max_n && p < end && p + 8 <= limit) {
        const uint8_t *r = d + p;
        long long size = be32(r);
        if (be32(r + 4) != magic || size < min_size || size > max_size || p + size > limit)
            break;
        if (crc32c(r + 12, (size_t)(size - 12)) != be32(r + 8))
            break;
        if (be64(r + 16) != (uint64_t)(base + p))
            break;
        starts[n++] = p;
        p += size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    int full = n == max_n;
    if (_PyBytes_Resize(&out, n * (Py_ssize_t)sizeof(int64_t)) < 0)
        return NULL;
    return Py_BuildValue("(NLO)", out, p, full ? Py_True : Py_False);
}

static PyObject *crc(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf))
        return NULL;
    uint32_t c = crc32c((const uint8_t *)buf.buf, (size_t)buf.len);
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Walk records; see the module source."},
    {"crc32c", crc, METH_VARARGS, "CRC-32C of a bytes-like object (tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "spark._walk", "The record walk of spark.columnar, in C.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__walk(void)
{
    crc_init();
    return PyModule_Create(&module);
}
