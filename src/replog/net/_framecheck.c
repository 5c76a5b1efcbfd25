/* Compiled walker of frame_check.py: checks a Kafka frame's lengths, counts and tagged-field
 * sizes against the bytes left, and its items against a budget, before any reader builds
 * anything from it.
 *
 * frame_check.py holds the program format (int32 words compiled from kio's schemas) and the
 * pure-Python walker this mirrors check for check and message for message; the two are run by
 * the same tests. It exists because the check runs on every request, a follower's Fetch of
 * thousands of partitions among them, where a walk in Python costs more than kio's decode.
 *
 * Recursion follows the program's blocks (a schema's nesting, a few levels), never the frame's
 * bytes; DEPTH_MAX guards against a malformed program. The frame is held through the buffer
 * protocol for the duration of a call; nothing is kept between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum { END, FIXED, STRING, BYTES, COMPACT, ARRAY, COMPACT_ARRAY, FIXED_ARRAY, COMPACT_FIXED_ARRAY, NULLABLE_STRUCT, TAGS };
#define UVARINT_BYTES_MAX 5
#define DEPTH_MAX 64

typedef struct {
    const int32_t *words;
    Py_ssize_t word_count;
    const unsigned char *frame;
    Py_ssize_t size;
    long long items;
    long long items_max;
} Walk;

static int need(const Walk *w, Py_ssize_t position, long long size) {
    if (size > (long long)(w->size - position)) {
        PyErr_Format(PyExc_ValueError, "%lld bytes needed at byte %zd, %zd left", size, position, w->size - position);
        return -1;
    }
    return 0;
}

/* Reads a uvarint at *position, moving it past; -1 with an exception set if it cannot. */
static int uvarint(const Walk *w, Py_ssize_t *position, long long *value) {
    uint64_t result = 0;
    for (int index = 0; index < UVARINT_BYTES_MAX; index++) {
        if (need(w, *position + index, 1) < 0) return -1;
        unsigned char byte = w->frame[*position + index];
        result |= (uint64_t)(byte & 0x7F) << (7 * index);
        if (!(byte & 0x80)) {
            *position += index + 1;
            *value = (long long)result;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "uvarint longer than %d bytes at byte %zd", UVARINT_BYTES_MAX, *position);
    return -1;
}

static int32_t read_i32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3]);
}

/* The length or count of a prefixed field (-1 for null) at *position, moving it past. */
static int length_of(const Walk *w, int op, Py_ssize_t *position, long long *length) {
    if (op == STRING) {
        if (need(w, *position, 2) < 0) return -1;
        *length = (int16_t)((uint16_t)w->frame[*position] << 8 | w->frame[*position + 1]);
        *position += 2;
        return 0;
    }
    if (op == BYTES || op == ARRAY || op == FIXED_ARRAY) {
        if (need(w, *position, 4) < 0) return -1;
        *length = read_i32(w->frame + *position);
        *position += 4;
        return 0;
    }
    if (uvarint(w, position, length) < 0) return -1;
    *length -= 1;
    return 0;
}

static int null_or_negative(long long length, Py_ssize_t start, int32_t nullable) {
    if (length < -1) {
        PyErr_Format(PyExc_ValueError, "negative length %lld at byte %zd", length, start);
        return -1;
    }
    if (length == -1 && !nullable) {
        PyErr_Format(PyExc_ValueError, "null at byte %zd where the schema allows none", start);
        return -1;
    }
    return 0;
}

static int add_items(Walk *w, long long count, Py_ssize_t start) {
    w->items += count;
    if (w->items > w->items_max) {
        PyErr_Format(PyExc_ValueError, "more than %lld items at byte %zd", w->items_max, start);
        return -1;
    }
    return 0;
}

/* An array's item count (0 for null), refused if its items cannot fit in the bytes left. */
static long long count_of(Walk *w, long long length, Py_ssize_t start, Py_ssize_t after, int32_t nullable,
                          int32_t item_bytes_min) {
    if (null_or_negative(length, start, nullable) < 0) return -1;
    if (length == -1) return 0;
    Py_ssize_t left = w->size - after;
    if (length > left / (item_bytes_min > 1 ? item_bytes_min : 1)) {
        PyErr_Format(PyExc_ValueError, "count %lld at byte %zd: the %zd bytes left hold fewer such items", length, start, left);
        return -1;
    }
    if (add_items(w, length, start) < 0) return -1;
    return length;
}

static int operands_in_program(const Walk *w, Py_ssize_t pc, int operands) {
    if (pc < 0 || pc + operands >= w->word_count) {
        PyErr_Format(PyExc_SystemError, "frame check program ends inside the op at word %zd", pc);
        return -1;
    }
    return 0;
}

static Py_ssize_t walk_block(Walk *w, Py_ssize_t pc, Py_ssize_t position, int depth);

static Py_ssize_t walk_tags(Walk *w, Py_ssize_t table, Py_ssize_t position, int depth) {
    long long count;
    if (uvarint(w, &position, &count) < 0) return -1;
    Py_ssize_t left = w->size - position;
    if (count > left / 2) {
        PyErr_Format(PyExc_ValueError, "%lld tagged fields at byte %zd with %zd bytes left", count, position, left);
        return -1;
    }
    if (add_items(w, count, position) < 0) return -1;
    if (operands_in_program(w, table, 0) < 0) return -1;
    int32_t known = w->words[table];
    if (operands_in_program(w, table, 2 * known) < 0) return -1;
    for (long long index = 0; index < count; index++) {  /* bounded: each takes at least 2 bytes */
        Py_ssize_t start = position;
        long long tag, size;
        if (uvarint(w, &position, &tag) < 0 || uvarint(w, &position, &size) < 0) return -1;
        if (size > (long long)(w->size - position)) {
            PyErr_Format(PyExc_ValueError, "tagged field of %lld bytes at byte %zd with %zd bytes left", size, start,
                         w->size - position);
            return -1;
        }
        Py_ssize_t block = -1;
        for (int32_t entry = 0; entry < known; entry++) {
            if (w->words[table + 1 + 2 * entry] == tag) {
                block = w->words[table + 2 + 2 * entry];
                break;
            }
        }
        if (block < 0) { /* unknown: skipped, as Kafka skips it */
            position += (Py_ssize_t)size;
            continue;
        }
        Py_ssize_t end = walk_block(w, block, position, depth + 1);
        if (end < 0) return -1;
        if (end - position != size) {
            PyErr_Format(PyExc_ValueError, "tagged field %lld at byte %zd declares %lld bytes and holds %zd", tag, start,
                         size, end - position);
            return -1;
        }
        position = end;
    }
    return position;
}

/* Walks the block at `pc` from `position`; where it ends, or -1 with an exception set. */
static Py_ssize_t walk_block(Walk *w, Py_ssize_t pc, Py_ssize_t position, int depth) {
    if (depth > DEPTH_MAX) {
        PyErr_SetString(PyExc_SystemError, "frame check program nests too deep");
        return -1;
    }
    for (;;) { /* bounded by the block's length: every op moves pc on */
        if (operands_in_program(w, pc, 0) < 0) return -1;
        int32_t op = w->words[pc];
        long long length, count;
        Py_ssize_t start = position;
        switch (op) {
        case END:
            return position;
        case FIXED:
            if (operands_in_program(w, pc, 1) < 0 || need(w, position, w->words[pc + 1]) < 0) return -1;
            position += w->words[pc + 1];
            pc += 2;
            break;
        case STRING:
        case BYTES:
        case COMPACT:
            if (operands_in_program(w, pc, 1) < 0 || length_of(w, op, &position, &length) < 0) return -1;
            if (null_or_negative(length, start, w->words[pc + 1]) < 0) return -1;
            if (length > (long long)(w->size - position)) {
                PyErr_Format(PyExc_ValueError, "length %lld at byte %zd with %zd bytes left", length, start, w->size - position);
                return -1;
            }
            if (length > 0) position += (Py_ssize_t)length;
            pc += 2;
            break;
        case ARRAY:
        case COMPACT_ARRAY:
            if (operands_in_program(w, pc, 3) < 0 || length_of(w, op, &position, &length) < 0) return -1;
            count = count_of(w, length, start, position, w->words[pc + 1], w->words[pc + 2]);
            if (count < 0) return -1;
            for (long long index = 0; index < count; index++) { /* bounded: count items fit in the bytes left */
                position = walk_block(w, w->words[pc + 3], position, depth + 1);
                if (position < 0) return -1;
            }
            pc += 4;
            break;
        case FIXED_ARRAY:
        case COMPACT_FIXED_ARRAY:
            if (operands_in_program(w, pc, 2) < 0 || length_of(w, op, &position, &length) < 0) return -1;
            count = count_of(w, length, start, position, w->words[pc + 1], w->words[pc + 2]);
            if (count < 0) return -1;
            position += (Py_ssize_t)(count * w->words[pc + 2]);
            pc += 3;
            break;
        case NULLABLE_STRUCT: {
            if (operands_in_program(w, pc, 1) < 0 || need(w, position, 1) < 0) return -1;
            int marker = (int8_t)w->frame[position];
            if (marker != -1 && marker != 1) {
                PyErr_Format(PyExc_ValueError, "nullable struct marker %d at byte %zd", marker, position);
                return -1;
            }
            position += 1;
            if (marker == 1) {
                position = walk_block(w, w->words[pc + 1], position, depth + 1);
                if (position < 0) return -1;
            }
            pc += 2;
            break;
        }
        case TAGS:
            if (operands_in_program(w, pc, 1) < 0) return -1;
            position = walk_tags(w, w->words[pc + 1], position, depth);
            if (position < 0) return -1;
            pc += 2;
            break;
        default:
            PyErr_Format(PyExc_SystemError, "frame check program has op %d at word %zd", op, pc);
            return -1;
        }
    }
}

static PyObject *check(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "check(program, frame, position, items_max)");
        return NULL;
    }
    PyObject *program = args[0];
    PyObject *code = PyTuple_Check(program) && PyTuple_GET_SIZE(program) == 3 ? PyTuple_GET_ITEM(program, 0) : NULL;
    if (code == NULL || !PyBytes_Check(code) || !PyLong_Check(PyTuple_GET_ITEM(program, 2))) {
        PyErr_SetString(PyExc_TypeError, "program must be a frame_check.Program");
        return NULL;
    }
    Py_ssize_t entry = PyLong_AsSsize_t(PyTuple_GET_ITEM(program, 2));
    Py_ssize_t position = PyLong_AsSsize_t(args[2]);
    long long items_max = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer frame;
    if (PyObject_GetBuffer(args[1], &frame, PyBUF_SIMPLE) < 0) return NULL;
    Walk w = {(const int32_t *)PyBytes_AS_STRING(code), PyBytes_GET_SIZE(code) / (Py_ssize_t)sizeof(int32_t),
              (const unsigned char *)frame.buf, frame.len, 0, items_max};
    Py_ssize_t end = -1;
    if (position < 0 || position > frame.len) {
        PyErr_Format(PyExc_ValueError, "position %zd outside a frame of %zd bytes", position, frame.len);
    } else {
        end = walk_block(&w, entry, position, 0);
    }
    PyBuffer_Release(&frame);
    return end < 0 ? NULL : PyLong_FromSsize_t(end);
}

static PyMethodDef methods[] = {
    {"check", (PyCFunction)(void (*)(void))check, METH_FASTCALL, "check(program, frame, position, items_max) -> end: see frame_check.FrameChecker."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_framecheck", NULL, -1, methods};

PyMODINIT_FUNC PyInit__framecheck(void) { return PyModule_Create(&module); }
