/* Optional compiled twin of records._decode_records_py: the records of one (decompressed) batch
 * appended to the source's column lists. Same contract, same results; the pure-Python one is
 * used when this is not built. It exists because per-record work in Python (seven varints, two
 * slices, five appends) bounded the Spark source at a few hundred thousand rows per second per
 * core.
 *
 * decode_records(data, count, base_offset, base_timestamp, log_append_time, start, end,
 *                keys, values, offsets, timestamps, headers) -> records added
 *
 * log_append_time is -1 for CreateTime batches; headers is None when not wanted. Any read past
 * the end of `data` or an over-long varint raises ValueError (the caller reports a corrupt batch).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    const uint8_t *buf;
    Py_ssize_t size;
    Py_ssize_t pos;
} Reader;

static int read_varint(Reader *r, int64_t *out) {
    uint64_t raw = 0;
    for (int shift = 0; shift < 70; shift += 7) { /* at most 10 bytes */
        if (r->pos >= r->size) return -1;
        uint8_t byte = r->buf[r->pos++];
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
    }
    return -1;
}

/* A length-prefixed byte string as bytes, or None for length -1; NULL with an exception set. */
static PyObject *read_bytes(Reader *r) {
    int64_t length;
    if (read_varint(r, &length) < 0) return NULL;
    if (length < 0) Py_RETURN_NONE;
    if (length > r->size - r->pos) return NULL;
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)r->buf + r->pos, (Py_ssize_t)length);
    r->pos += (Py_ssize_t)length;
    return bytes;
}

static int append_new(PyObject *list, PyObject *item) {
    if (item == NULL) return -1;
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

/* A record's headers: a list of (str, bytes | None), or None when it has none. */
static PyObject *read_headers(Reader *r) {
    int64_t count;
    if (read_varint(r, &count) < 0) return NULL;
    if (count <= 0) Py_RETURN_NONE;
    if (count > r->size - r->pos) return NULL; /* each header takes at least one byte */
    PyObject *headers = PyList_New(0);
    if (headers == NULL) return NULL;
    for (int64_t i = 0; i < count; i++) {
        int64_t key_length;
        if (read_varint(r, &key_length) < 0 || key_length < 0 || key_length > r->size - r->pos) goto fail;
        PyObject *key = PyUnicode_DecodeUTF8((const char *)r->buf + r->pos, (Py_ssize_t)key_length, "strict");
        if (key == NULL) goto fail;
        r->pos += (Py_ssize_t)key_length;
        PyObject *value = read_bytes(r);
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        if (append_new(headers, PyTuple_Pack(2, key, value)) < 0) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto fail;
        }
        Py_DECREF(key);
        Py_DECREF(value);
    }
    return headers;
fail:
    Py_DECREF(headers);
    return NULL;
}

static PyObject *corrupt(const char *what) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "records are corrupt: %s", what);
    return NULL;
}

static PyObject *decode_records(PyObject *self, PyObject *args) {
    Py_buffer data;
    Py_ssize_t count;
    long long base_offset, base_timestamp, log_append_time, start, end;
    PyObject *keys, *values, *offsets, *timestamps, *headers;
    if (!PyArg_ParseTuple(args, "y*nLLLLLO!O!O!O!O", &data, &count, &base_offset, &base_timestamp, &log_append_time,
                          &start, &end, &PyList_Type, &keys, &PyList_Type, &values, &PyList_Type, &offsets,
                          &PyList_Type, &timestamps, &headers))
        return NULL;
    Reader r = {(const uint8_t *)data.buf, data.len, 0};
    Py_ssize_t added = 0;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, timestamp_delta, offset_delta;
        if (read_varint(&r, &length) < 0 || length < 0 || length > r.size - r.pos) {
            corrupt("a record length runs past the batch");
            goto done;
        }
        Py_ssize_t record_end = r.pos + (Py_ssize_t)length;
        r.pos += 1; /* attributes: unused in v2 */
        if (read_varint(&r, &timestamp_delta) < 0 || read_varint(&r, &offset_delta) < 0) {
            corrupt("a record's deltas");
            goto done;
        }
        long long offset = base_offset + offset_delta;
        if (offset < start || offset >= end) {
            r.pos = record_end;
            continue;
        }
        Reader field = {r.buf, record_end, r.pos}; /* a record's fields stay within the record */
        PyObject *key = read_bytes(&field);
        if (key == NULL) {
            corrupt("a record's key");
            goto done;
        }
        PyObject *value = read_bytes(&field);
        if (value == NULL) {
            Py_DECREF(key);
            corrupt("a record's value");
            goto done;
        }
        if (append_new(keys, key) < 0 || append_new(values, value) < 0) goto done;
        if (headers != Py_None) {
            PyObject *record_headers = read_headers(&field);
            if (record_headers == NULL) {
                corrupt("a record's headers");
                goto done;
            }
            if (append_new(headers, record_headers) < 0) goto done;
        }
        long long timestamp = log_append_time >= 0 ? log_append_time : base_timestamp + timestamp_delta;
        if (append_new(offsets, PyLong_FromLongLong(offset)) < 0 ||
            append_new(timestamps, PyLong_FromLongLong(timestamp)) < 0)
            goto done;
        added++;
        r.pos = record_end;
    }
    result = PyLong_FromSsize_t(added);
done:
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS, "Append one batch's records in [start, end) to the column lists."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastrecords", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastrecords(void) { return PyModule_Create(&module); }
