/* Compiled fast path of records.py: validate a follower's buffer of v2 record batches
 * (validate_batches); validate a producer's batch as Kafka's LogValidator does, reading every
 * record, and assign its base offset and leader epoch in place (assign_batches), or read the
 * records a compressed batch decompressed to, without the GIL (check_records); and scan a
 * segment file after a crash (scan_segment), checking every batch and deriving the segment's
 * index on the way.
 *
 * batch_format.py describes the bytes, and records.py holds the pure-Python implementation this
 * mirrors check for check and message for message; the two are run by the same tests. It exists
 * because a produce request's per-append Python work (header unpacking, CRC call, NamedTuple
 * construction, offset rewrite) cost as much as the write syscall itself, and a record walk in
 * Python would cost far more; here it is one call, no Python object per record.
 *
 * Results are built as instances of the Python types records.py hands over once through
 * bind(): validate_batches returns a list of BatchHeader (one per batch), assign_batches one
 * BatchRun (what the log needs of the batch, no header object), scan_segment one SegmentScan.
 * All are tuple subclasses, so an instance is allocated and filled like a tuple.
 *
 * CRC32C: carry-less-multiply folding (AVX-512 VPCLMULQDQ, else 128-bit PCLMULQDQ) when the CPU
 * has it, else the SSE4.2 `crc32` instruction over three interleaved streams, else a slicing-by-8
 * table; the fastest the CPU can run is chosen at import. Buffers are caller-owned and held
 * through the buffer protocol for the duration of a call; nothing is kept between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_SSE42_CRC 1
#include <immintrin.h>
#if (defined(__clang__) && __clang_major__ >= 8) || (!defined(__clang__) && __GNUC__ >= 8)
#define HAVE_VPCLMULQDQ_CRC 1 /* compilers that know the AVX-512 carry-less multiply */
#endif
#endif

/* -- layout (see batch_format.py) ------------------------------------------------------------- */

#define LOG_OVERHEAD_BYTES 12
#define HEADER_SIZE_BYTES 61
#define LEADER_EPOCH_POSITION 12
#define MAGIC_POSITION 16
#define CRC_POSITION 17
#define CRC_START 21
#define ATTRIBUTES_POSITION 21
#define LAST_OFFSET_DELTA_POSITION 23
#define BASE_TIMESTAMP_POSITION 27
#define MAX_TIMESTAMP_POSITION 35
#define PRODUCER_ID_POSITION 43
#define PRODUCER_EPOCH_POSITION 51
#define BASE_SEQUENCE_POSITION 53
#define RECORD_COUNT_POSITION 57
#define MAGIC_V2 2
#define CODEC_MASK 0x07
#define MAX_CODEC 4
#define NO_TIMESTAMP (-1)
#define BATCH_HEADER_FIELDS 9
#define BATCH_RUN_FIELDS 4
#define SEGMENT_SCAN_FIELDS 9
#define REJECTED_RECORDS_FIELDS 6

static uint32_t read_u32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static int32_t read_i32(const unsigned char *p) { return (int32_t)read_u32(p); }

static int16_t read_i16(const unsigned char *p) { return (int16_t)((uint16_t)p[0] << 8 | p[1]); }

static int64_t read_i64(const unsigned char *p) {
    return (int64_t)((uint64_t)read_u32(p) << 32 | read_u32(p + 4));
}

static void write_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void write_i64(unsigned char *p, int64_t v) {
    write_u32(p, (uint32_t)((uint64_t)v >> 32));
    write_u32(p + 4, (uint32_t)v);
}

/* -- CRC32C (Castagnoli, reflected polynomial 0x82f63b78) --------------------------------------- */

#define CRC32C_POLY 0x82f63b78u

static uint32_t crc_table[8][256]; /* slicing-by-8 */

static uint32_t crc32c_software(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t low = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t high = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_table[7][low & 0xff] ^ crc_table[6][(low >> 8) & 0xff] ^ crc_table[5][(low >> 16) & 0xff] ^
              crc_table[4][low >> 24] ^ crc_table[3][high & 0xff] ^ crc_table[2][(high >> 8) & 0xff] ^
              crc_table[1][(high >> 16) & 0xff] ^ crc_table[0][high >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* a * b modulo the polynomial, in the reflected representation (zlib's multmodp). */
static uint32_t multiply_mod_poly(uint32_t a, uint32_t b) {
    uint32_t m = (uint32_t)1 << 31, product = 0;
    for (;;) {
        if (a & m) {
            product ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return product;
}

/* x^bits modulo the polynomial. */
static uint32_t x_power(uint64_t bits) {
    uint32_t result = (uint32_t)1 << 31; /* x^0 */
    uint32_t square = (uint32_t)1 << 30; /* x^1 */
    while (bits) {
        if (bits & 1)
            result = multiply_mod_poly(square, result);
        square = multiply_mod_poly(square, square);
        bits >>= 1;
    }
    return result;
}

static void init_software_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = n;
        for (int k = 0; k < 8; k++)
            crc = crc & 1 ? (crc >> 1) ^ CRC32C_POLY : crc >> 1;
        crc_table[0][n] = crc;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            crc_table[k][n] = crc_table[0][crc_table[k - 1][n] & 0xff] ^ (crc_table[k - 1][n] >> 8);
}

#ifdef HAVE_SSE42_CRC
/* The crc32 instruction has a latency of 3 cycles and a throughput of 1, so three independent
 * streams over adjacent blocks keep it busy; their registers are then merged by shifting the
 * earlier ones over the later blocks' length (a table lookup per register byte). The long block
 * is sized so that a 16 KiB batch, the common produce size, still takes the long path twice. */
#define LONG_BLOCK 2048
#define SHORT_BLOCK 256

static uint32_t shift_long[4][256], shift_short[4][256];

static void init_shift_table(uint32_t table[4][256], size_t block_bytes) {
    uint32_t op = x_power(8 * (uint64_t)block_bytes); /* feeds block_bytes zero bytes */
    for (int k = 0; k < 4; k++)
        for (uint32_t n = 0; n < 256; n++)
            table[k][n] = multiply_mod_poly(op, n << (8 * k));
}

static uint32_t shift_register(uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^ table[3][crc >> 24];
}

static uint64_t load_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8); /* x86 is little-endian, as the instruction expects its operand */
    return v;
}

#define INTERLEAVED_BLOCKS(block_bytes, table)                                                      \
    while (n >= 3 * (block_bytes)) {                                                                \
        uint64_t crc1 = 0, crc2 = 0;                                                                \
        const unsigned char *end = p + (block_bytes);                                               \
        do {                                                                                        \
            crc0 = _mm_crc32_u64(crc0, load_u64(p));                                                \
            crc1 = _mm_crc32_u64(crc1, load_u64(p + (block_bytes)));                                \
            crc2 = _mm_crc32_u64(crc2, load_u64(p + 2 * (block_bytes)));                            \
            p += 8;                                                                                 \
        } while (p < end);                                                                          \
        crc0 = shift_register(table, (uint32_t)crc0) ^ (uint32_t)crc1;                              \
        crc0 = shift_register(table, (uint32_t)crc0) ^ (uint32_t)crc2;                              \
        p += 2 * (block_bytes);                                                                     \
        n -= 3 * (block_bytes);                                                                     \
    }

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t crc0 = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc0 = _mm_crc32_u8((uint32_t)crc0, *p++);
        n--;
    }
    INTERLEAVED_BLOCKS(LONG_BLOCK, shift_long)
    INTERLEAVED_BLOCKS(SHORT_BLOCK, shift_short)
    while (n >= 8) {
        crc0 = _mm_crc32_u64(crc0, load_u64(p));
        p += 8;
        n -= 8;
    }
    while (n--)
        crc0 = _mm_crc32_u8((uint32_t)crc0, *p++);
    return ~(uint32_t)crc0;
}

/* Folding: the bytes seen so far are kept as a 128-bit remainder-equivalent per lane, and each
 * step multiplies a lane by x^(8 * distance) modulo the polynomial (two carry-less multiplies of
 * its 64-bit halves by precomputed constants) and adds the next block. Lanes are independent
 * until the end, so as many multiplies are in flight as there are lanes; the lanes are then
 * folded into one, whose 128 bits the crc32 instruction itself reduces.
 *
 * Bit-reflected operands: a carry-less product of two reflected values is the reflected product
 * times x, and a 32-bit constant in the low half of a 64-bit operand stands for itself times x^32;
 * hence the 33 taken off the exponents below. */
typedef struct {
    uint64_t high_half; /* multiplies the earlier (low) 64 bits of a lane */
    uint64_t low_half;  /* multiplies the later (high) 64 bits */
} FoldConstants;

static FoldConstants fold_64, fold_16;

static FoldConstants fold_constants(unsigned distance_bytes) {
    FoldConstants k = {x_power(8 * (uint64_t)distance_bytes + 64 - 33), x_power(8 * (uint64_t)distance_bytes - 33)};
    return k;
}

#define PCLMUL_TARGET __attribute__((target("pclmul,sse4.2")))

PCLMUL_TARGET static __m128i fold_vector(FoldConstants k) {
    return _mm_set_epi64x((long long)k.low_half, (long long)k.high_half);
}

PCLMUL_TARGET static __m128i fold_128(__m128i lane, __m128i k, __m128i next) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(lane, k, 0x00), _mm_clmulepi64_si128(lane, k, 0x11)), next);
}

/* The CRC of four adjacent lanes (x0 the earliest), followed by the n bytes at p. */
PCLMUL_TARGET static uint32_t fold_lanes_and_tail(__m128i x0, __m128i x1, __m128i x2, __m128i x3,
                                                  const unsigned char *p, size_t n) {
    __m128i k16 = fold_vector(fold_16);
    __m128i lane = fold_128(fold_128(fold_128(x0, k16, x1), k16, x2), k16, x3);
    for (; n >= 16; p += 16, n -= 16)
        lane = fold_128(lane, k16, _mm_loadu_si128((const __m128i *)p));
    uint64_t state = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(lane));
    state = _mm_crc32_u64(state, (uint64_t)_mm_extract_epi64(lane, 1));
    return crc32c_sse42(~(uint32_t)state, p, n); /* the tail, from the register value reached */
}

/* PCLMULQDQ, 128 bits at a time: four lanes over 64 bytes a step, about 1.7 times what the crc32
 * instruction streams do from 16 KiB on AMD EPYC (Zen 1). Eight lanes measured no faster there,
 * and slower from 128 to 512 bytes, where more of the input is left to the one-lane 16-byte folds
 * at the end: what bounds this loop is the multiplier's throughput, not its latency. One step,
 * 64 bytes, is already as fast as the crc32 instruction, whose streams only interleave from 768. */
#define PCLMUL_MIN_BYTES 64

PCLMUL_TARGET static uint32_t crc32c_pclmul(uint32_t crc, const unsigned char *p, size_t n) {
    if (n < PCLMUL_MIN_BYTES)
        return crc32c_sse42(crc, p, n);
    /* An initial register value is the same as that value added to the first 32 bits. */
    __m128i x0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)~crc));
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16)), x2 = _mm_loadu_si128((const __m128i *)(p + 32)),
            x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    p += 64;
    n -= 64;
    __m128i k = fold_vector(fold_64);
    for (; n >= 64; p += 64, n -= 64) {
        x0 = fold_128(x0, k, _mm_loadu_si128((const __m128i *)p));
        x1 = fold_128(x1, k, _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = fold_128(x2, k, _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = fold_128(x3, k, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    return fold_lanes_and_tail(x0, x1, x2, x3, p, n);
}
#endif

#ifdef HAVE_VPCLMULQDQ_CRC
/* The same folding on AVX-512: four 512-bit registers give sixteen lanes over 256 bytes a step,
 * about three times what the crc32 instruction streams do. */
static FoldConstants fold_256;

#define VPCLMUL_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")))

VPCLMUL_TARGET static __m512i fold_512(__m512i lanes, __m512i k, __m512i next) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(lanes, k, 0x00), _mm512_clmulepi64_epi128(lanes, k, 0x11),
                                     next, 0x96); /* three-way xor */
}

VPCLMUL_TARGET static uint32_t crc32c_vpclmulqdq(uint32_t crc, const unsigned char *p, size_t n) {
    if (n < 256)
        return crc32c_sse42(crc, p, n);
    __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_castsi128_si512(_mm_cvtsi32_si128((int)~crc)));
    __m512i x1 = _mm512_loadu_si512(p + 64), x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
    p += 256;
    n -= 256;
    __m512i k = _mm512_broadcast_i32x4(fold_vector(fold_256));
    while (n >= 256) {
        x0 = fold_512(x0, k, _mm512_loadu_si512(p));
        x1 = fold_512(x1, k, _mm512_loadu_si512(p + 64));
        x2 = fold_512(x2, k, _mm512_loadu_si512(p + 128));
        x3 = fold_512(x3, k, _mm512_loadu_si512(p + 192));
        p += 256;
        n -= 256;
    }
    k = _mm512_broadcast_i32x4(fold_vector(fold_64));
    x0 = fold_512(x0, k, x1);
    x0 = fold_512(x0, k, x2);
    x0 = fold_512(x0, k, x3);
    for (; n >= 64; p += 64, n -= 64)
        x0 = fold_512(x0, k, _mm512_loadu_si512(p));
    return fold_lanes_and_tail(_mm512_extracti32x4_epi32(x0, 0), _mm512_extracti32x4_epi32(x0, 1),
                               _mm512_extracti32x4_epi32(x0, 2), _mm512_extracti32x4_epi32(x0, 3), p, n);
}
#endif

static uint32_t (*crc32c_update)(uint32_t, const unsigned char *, size_t) = crc32c_software;
static const char *crc32c_names[4];
static uint32_t (*crc32c_functions[4])(uint32_t, const unsigned char *, size_t);
static int crc32c_count;

static void crc32c_offer(const char *name, uint32_t (*update)(uint32_t, const unsigned char *, size_t)) {
    crc32c_names[crc32c_count] = name;
    crc32c_functions[crc32c_count++] = update;
    crc32c_update = update;
}

/* Registers every implementation this CPU can run, fastest last, and selects the last. */
static void crc32c_select(void) {
    init_software_tables();
    crc32c_offer("software", crc32c_software);
#ifdef HAVE_SSE42_CRC
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("sse4.2"))
        return;
    init_shift_table(shift_long, LONG_BLOCK);
    init_shift_table(shift_short, SHORT_BLOCK);
    crc32c_offer("sse4.2", crc32c_sse42);
    if (!__builtin_cpu_supports("pclmul"))
        return;
    fold_64 = fold_constants(64);
    fold_16 = fold_constants(16);
    crc32c_offer("pclmul", crc32c_pclmul);
#ifdef HAVE_VPCLMULQDQ_CRC
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("vpclmulqdq")) {
        fold_256 = fold_constants(256);
        crc32c_offer("vpclmulqdq", crc32c_vpclmulqdq);
    }
#endif
#endif
}

/* -- the Python types the results are built from (set by bind) ---------------------------------- */

static PyTypeObject *batch_header_type;
static PyTypeObject *batch_run_type;
static PyTypeObject *segment_scan_type;
static PyTypeObject *rejected_records_type;

/* Why a batch was refused: the kind (which exception records.py raises for it), the message, and
 * the record it is about (-1: the batch as a whole). Written without the GIL, so that the file
 * scan and check_records can run with it released. */
typedef enum {
    BATCH_OK = 0,
    BATCH_CORRUPT,
    BATCH_INVALID,
    BATCH_TOO_LARGE,
    BATCH_INVALID_TIMESTAMP,
    BATCH_FAULT_KINDS
} BatchFault;

/* The exception of each kind but BATCH_OK, in BatchFault's order. */
static PyObject *fault_errors[BATCH_FAULT_KINDS];

static int check_tuple_type(PyObject *type, Py_ssize_t fields, const char *name) {
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple subclass", name);
        return -1;
    }
    PyObject *names = PyObject_GetAttrString(type, "_fields");
    if (names == NULL)
        return -1;
    Py_ssize_t count = PyObject_Length(names);
    Py_DECREF(names);
    if (count != fields) {
        if (count >= 0)
            PyErr_Format(PyExc_TypeError, "%s must have %zd fields, not %zd", name, fields, count);
        return -1;
    }
    return 0;
}

static PyObject *bind(PyObject *module, PyObject *args) {
    PyObject *header, *run, *segment_scan, *rejected, *errors[BATCH_FAULT_KINDS - 1];
    if (!PyArg_ParseTuple(args, "OOOOOOOO:bind", &header, &run, &segment_scan, &rejected, &errors[0], &errors[1],
                          &errors[2], &errors[3]))
        return NULL;
    if (check_tuple_type(header, BATCH_HEADER_FIELDS, "BatchHeader") < 0 ||
        check_tuple_type(run, BATCH_RUN_FIELDS, "BatchRun") < 0 ||
        check_tuple_type(segment_scan, SEGMENT_SCAN_FIELDS, "SegmentScan") < 0 ||
        check_tuple_type(rejected, REJECTED_RECORDS_FIELDS, "RejectedRecords") < 0)
        return NULL;
    Py_INCREF(rejected);
    Py_XSETREF(rejected_records_type, (PyTypeObject *)rejected);
    Py_INCREF(header);
    Py_XSETREF(batch_header_type, (PyTypeObject *)header);
    Py_INCREF(run);
    Py_XSETREF(batch_run_type, (PyTypeObject *)run);
    Py_INCREF(segment_scan);
    Py_XSETREF(segment_scan_type, (PyTypeObject *)segment_scan);
    for (int i = 0; i < BATCH_FAULT_KINDS - 1; i++) {
        Py_INCREF(errors[i]);
        Py_XSETREF(fault_errors[i + 1], errors[i]);
    }
    Py_RETURN_NONE;
}

/* A tuple-subclass instance whose items are the `count` new references in `items` (stolen, even
 * on failure). */
static PyObject *new_record(PyTypeObject *type, PyObject **items, Py_ssize_t count) {
    PyObject *record = type->tp_alloc(type, count);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (record == NULL || items[i] == NULL) {
            for (Py_ssize_t j = i; j < count; j++)
                Py_XDECREF(items[j]);
            Py_XDECREF(record);
            return NULL;
        }
        PyTuple_SET_ITEM(record, i, items[i]);
    }
    return record;
}

/* -- validation ------------------------------------------------------------------------------- */

typedef struct {
    int64_t base_offset;
    int64_t size_bytes; /* whole batch, log overhead included */
    int32_t leader_epoch;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t max_timestamp;
    int32_t record_count;
    uint32_t crc;
} Header;

#define RECORD_ERRORS_MAX 1000 /* errors.RECORD_ERRORS_MAX */
#define REJECTED_NO_KEY INT64_MIN /* a record without a key: None in errors.RejectedRecords.timestamps */

/* The records of a batch refused one by one, as Kafka's LogValidator collects its record errors
 * (errors.RejectedRecords): all are counted, the first RECORD_ERRORS_MAX listed. */
typedef struct {
    long long total;
    int listed;
    int any_timestamp;
    int64_t base_offset, timestamp_low, timestamp_high;
    int32_t index[RECORD_ERRORS_MAX];
    int64_t timestamp[RECORD_ERRORS_MAX]; /* the one out of bounds, or REJECTED_NO_KEY */
} Rejected;

typedef struct {
    BatchFault fault;
    long long record_index;
    char message[256];
    Rejected rejected; /* read only where rejected.total > 0: a refusal of records one by one */
} Refusal;

static BatchFault refuse_message(Refusal *refusal, BatchFault fault, long long record_index, const char *format,
                                 va_list args) {
    vsnprintf(refusal->message, sizeof refusal->message, format, args);
    refusal->record_index = record_index;
    refusal->rejected.total = 0;
    return refusal->fault = fault;
}

static BatchFault refuse(Refusal *refusal, BatchFault fault, const char *format, ...) {
    va_list args;
    va_start(args, format);
    refuse_message(refusal, fault, -1, format, args);
    va_end(args);
    return fault;
}

/* A refusal about record `index` of its batch. */
static BatchFault refuse_record(Refusal *refusal, BatchFault fault, long long index, const char *format, ...) {
    va_list args;
    va_start(args, format);
    refuse_message(refusal, fault, index, format, args);
    va_end(args);
    return fault;
}

/* Record `index` refused on its own: without a key (REJECTED_NO_KEY), or with `timestamp` out of
 * bounds. The batch is refused once all its records are read. */
static void reject_record(Rejected *rejected, long long index, int64_t timestamp) {
    if (rejected->listed < RECORD_ERRORS_MAX) {
        rejected->index[rejected->listed] = (int32_t)index;
        rejected->timestamp[rejected->listed++] = timestamp;
    }
    rejected->total++;
    rejected->any_timestamp |= timestamp != REJECTED_NO_KEY;
}

/* The errors.RejectedRecords of `rejected` (total > 0). */
static PyObject *rejected_records(const Rejected *rejected) {
    PyObject *indexes = PyTuple_New(rejected->listed), *timestamps = PyTuple_New(rejected->listed);
    for (int i = 0; indexes != NULL && timestamps != NULL && i < rejected->listed; i++) {
        PyObject *index = PyLong_FromLong(rejected->index[i]);
        PyObject *timestamp = rejected->timestamp[i] == REJECTED_NO_KEY ? Py_NewRef(Py_None)
                                                                        : PyLong_FromLongLong(rejected->timestamp[i]);
        PyTuple_SET_ITEM(indexes, i, index);
        PyTuple_SET_ITEM(timestamps, i, timestamp);
        if (index == NULL || timestamp == NULL)
            break;
    }
    if (PyErr_Occurred()) {
        Py_XDECREF(indexes);
        Py_XDECREF(timestamps);
        return NULL;
    }
    PyObject *items[REJECTED_RECORDS_FIELDS] = {PyLong_FromLongLong(rejected->total), indexes, timestamps,
                                                PyLong_FromLongLong(rejected->base_offset),
                                                PyLong_FromLongLong(rejected->timestamp_low),
                                                PyLong_FromLongLong(rejected->timestamp_high)};
    return new_record(rejected_records_type, items, REJECTED_RECORDS_FIELDS);
}

/* Raises the exception records.py raises for the refusal, (message, record_index or None), or for
 * records refused one by one (message, None, RejectedRecords); returns -1 for the caller to pass
 * on. */
static int raise_refusal(const Refusal *refusal) {
    PyObject *error = refusal->fault > BATCH_OK && refusal->fault < BATCH_FAULT_KINDS ? fault_errors[refusal->fault] : NULL;
    if (error == NULL || rejected_records_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastbatch.bind() was not called");
        return -1;
    }
    PyObject *exception;
    if (refusal->rejected.total > 0) {
        PyObject *rejected = rejected_records(&refusal->rejected);
        if (rejected == NULL)
            return -1;
        exception = PyObject_CallFunction(error, "sOO", refusal->message, Py_None, rejected);
        Py_DECREF(rejected);
    } else {
        exception = refusal->record_index < 0
                        ? PyObject_CallFunction(error, "s", refusal->message)
                        : PyObject_CallFunction(error, "sL", refusal->message, refusal->record_index);
    }
    if (exception != NULL) {
        PyErr_SetObject(error, exception);
        Py_DECREF(exception);
    }
    return -1;
}

/* Checks of records.parse_header on the batch at `p`, of which `available` bytes are at hand;
 * messages name `position`, the batch's position in its buffer or file. */
static BatchFault read_header(const unsigned char *p, long long available, long long position, Header *header,
                              Refusal *refusal) {
    if (available < LOG_OVERHEAD_BYTES)
        return refuse(refusal, BATCH_CORRUPT, "%lld bytes at position %lld cannot hold a batch", available, position);
    int32_t batch_length = read_i32(p + 8);
    if (batch_length >= MAGIC_POSITION - LOG_OVERHEAD_BYTES + 1 && available > MAGIC_POSITION) {
        int magic = p[MAGIC_POSITION];
        if (magic == 0 || magic == 1)
            return refuse(refusal, BATCH_INVALID, "magic %d at position %lld: only v2 batches are accepted", magic,
                          position);
        if (magic != MAGIC_V2)
            return refuse(refusal, BATCH_CORRUPT, "magic %d at position %lld is not a record batch", magic, position);
    }
    if (batch_length < HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES)
        return refuse(refusal, BATCH_CORRUPT, "batch length %d at position %lld is shorter than a header",
                      (int)batch_length, position);
    if (available < HEADER_SIZE_BYTES)
        return refuse(refusal, BATCH_CORRUPT, "header at position %lld is cut after %lld bytes", position, available);
    header->base_offset = read_i64(p);
    header->leader_epoch = read_i32(p + LEADER_EPOCH_POSITION);
    header->crc = read_u32(p + CRC_POSITION);
    header->attributes = read_i16(p + ATTRIBUTES_POSITION);
    header->last_offset_delta = read_i32(p + LAST_OFFSET_DELTA_POSITION);
    header->max_timestamp = read_i64(p + MAX_TIMESTAMP_POSITION);
    header->record_count = read_i32(p + RECORD_COUNT_POSITION);
    if (header->last_offset_delta < 0 || header->record_count < 0)
        return refuse(refusal, BATCH_CORRUPT, "batch at position %lld has last offset delta %d, count %d", position,
                      (int)header->last_offset_delta, (int)header->record_count);
    if ((header->attributes & CODEC_MASK) > MAX_CODEC)
        return refuse(refusal, BATCH_INVALID, "batch at position %lld has unknown codec %d", position,
                      header->attributes & CODEC_MASK);
    header->size_bytes = (int64_t)batch_length + LOG_OVERHEAD_BYTES;
    return BATCH_OK;
}

static BatchFault refuse_short(Refusal *refusal, long long position, long long size_bytes, long long remaining) {
    return refuse(refusal, BATCH_CORRUPT, "batch at position %lld needs %lld bytes, %lld remain", position, size_bytes,
                  remaining);
}

static BatchFault refuse_crc(Refusal *refusal, long long position, uint32_t computed, uint32_t stored) {
    return refuse(refusal, BATCH_CORRUPT, "batch at position %lld: CRC32C %#010x != stored %#010x", position,
                  (unsigned)computed, (unsigned)stored);
}

/* Checks of records.parse_header, verify_batch and the max.message.bytes rule, in their order. */
static BatchFault read_batch(const unsigned char *buf, Py_ssize_t length, Py_ssize_t position, long long max_batch_bytes,
                             Header *header, Refusal *refusal) {
    const unsigned char *p = buf + position;
    long long available = length - position;
    BatchFault fault = read_header(p, available, position, header, refusal);
    if (fault != BATCH_OK)
        return fault;
    if (header->size_bytes > max_batch_bytes)
        return refuse(refusal, BATCH_TOO_LARGE, "batch of %lld bytes exceeds max.message.bytes %lld",
                      (long long)header->size_bytes, max_batch_bytes);
    if (header->size_bytes > available)
        return refuse_short(refusal, position, header->size_bytes, available);
    uint32_t computed = crc32c_update(0, p + CRC_START, (size_t)(header->size_bytes - CRC_START));
    if (computed != header->crc)
        return refuse_crc(refusal, position, computed, header->crc);
    return BATCH_OK;
}

static PyObject *new_header(Py_ssize_t position, const Header *h) {
    PyObject *items[BATCH_HEADER_FIELDS] = {
        PyLong_FromSsize_t(position),         PyLong_FromLongLong(h->size_bytes),
        PyLong_FromLongLong(h->base_offset),  PyLong_FromLong(h->leader_epoch),
        PyLong_FromLong(h->attributes),       PyLong_FromLong(h->last_offset_delta),
        PyLong_FromLongLong(h->max_timestamp), PyLong_FromLong(h->record_count),
        PyLong_FromUnsignedLong(h->crc),
    };
    return new_record(batch_header_type, items, BATCH_HEADER_FIELDS);
}

/* records.validate_batches: every batch of `buffer` checked as read_batch does; their headers. */
static PyObject *validate(Py_buffer *buffer, long long max_batch_bytes) {
    if (batch_header_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastbatch.bind() was not called");
        return NULL;
    }
    const unsigned char *buf = buffer->buf;
    Py_ssize_t length = buffer->len;
    Refusal refusal;
    if (length == 0) {
        refuse(&refusal, BATCH_INVALID, "no record batch in the request");
        raise_refusal(&refusal);
        return NULL;
    }
    PyObject *headers = PyList_New(0);
    if (headers == NULL)
        return NULL;
    Header h = {0};
    for (Py_ssize_t position = 0; position < length; position += (Py_ssize_t)h.size_bytes) { /* >= 61 bytes a step */
        if (read_batch(buf, length, position, max_batch_bytes, &h, &refusal) != BATCH_OK) {
            raise_refusal(&refusal);
            Py_DECREF(headers);
            return NULL;
        }
        PyObject *header = new_header(position, &h);
        if (header == NULL || PyList_Append(headers, header) < 0) {
            Py_XDECREF(header);
            Py_DECREF(headers);
            return NULL;
        }
        Py_DECREF(header);
    }
    return headers;
}

/* -- a leader's append: Kafka's LogValidator (records.AppendRules, records._check_producer_batch) */

#define LOG_APPEND_TIME_BIT 0x08
#define TRANSACTIONAL_BIT 0x10
#define CONTROL_BATCH_BIT 0x20
#define NO_PRODUCER_ID (-1)
#define APPEND_RULES_FIELDS 8

typedef struct {
    long long max_batch_bytes, timestamp_before_max_ms, timestamp_after_max_ms;
    int keys_required, log_append_time;
} Rules;

/* The rules from a records.AppendRules (the decompression limit and the topic's codec and level are Python's). */
static int read_rules(PyObject *tuple, Rules *rules) {
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != APPEND_RULES_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "rules must be a records.AppendRules");
        return -1;
    }
    rules->max_batch_bytes = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, 0));
    rules->timestamp_before_max_ms = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, 1));
    rules->timestamp_after_max_ms = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, 2));
    rules->keys_required = PyObject_IsTrue(PyTuple_GET_ITEM(tuple, 3));
    rules->log_append_time = PyObject_IsTrue(PyTuple_GET_ITEM(tuple, 5));
    return PyErr_Occurred() ? -1 : 0;
}

/* records._check_producer_batch: the batch rules before its records. */
static BatchFault check_producer_batch(const unsigned char *buf, Py_ssize_t length, const Rules *rules, Header *h,
                                       Refusal *refusal) {
    if (length == 0)
        return refuse(refusal, BATCH_INVALID, "no record batch in the request");
    BatchFault fault = read_batch(buf, length, 0, rules->max_batch_bytes, h, refusal);
    if (fault != BATCH_OK)
        return fault;
    if (h->size_bytes < length)
        return refuse(refusal, BATCH_INVALID, "only one record batch per partition is accepted: %lld bytes follow the first",
                      (long long)(length - h->size_bytes));
    if (h->record_count == 0 || (int64_t)h->record_count != (int64_t)h->last_offset_delta + 1)
        return refuse(refusal, BATCH_INVALID, "batch at position 0 claims %d records but spans %lld offsets",
                      (int)h->record_count, (long long)h->last_offset_delta + 1);
    if (h->attributes & CONTROL_BATCH_BIT)
        return refuse(refusal, BATCH_INVALID, "clients may not write control batches");
    int64_t producer_id = read_i64(buf + PRODUCER_ID_POSITION);
    int32_t base_sequence = read_i32(buf + BASE_SEQUENCE_POSITION);
    if (producer_id < NO_PRODUCER_ID)
        return refuse(refusal, BATCH_INVALID, "producer id %lld is not valid", (long long)producer_id);
    if ((h->attributes & TRANSACTIONAL_BIT) && producer_id == NO_PRODUCER_ID)
        return refuse(refusal, BATCH_INVALID, "a transactional batch needs a producer id");
    if (producer_id != NO_PRODUCER_ID && base_sequence < 0)
        return refuse(refusal, BATCH_INVALID, "invalid sequence number %d in a batch with producer id %lld",
                      (int)base_sequence, (long long)producer_id);
    if (h->attributes & LOG_APPEND_TIME_BIT)
        return refuse(refusal, BATCH_INVALID_TIMESTAMP, "producers may not set the timestamp type to LogAppendTime");
    return BATCH_OK;
}

typedef enum { VARINT_OK = 0, VARINT_CUT, VARINT_INVALID } VarintRead;

/* The zigzag varint of at most `bits` (32 or 64) bits at `*position`, read no further than `end`:
 * 5 or 10 bytes at most, and a value that fits. */
static VarintRead read_varint(const unsigned char *p, int64_t *position, int64_t end, int bits, int64_t *value) {
    uint64_t raw = 0;
    int max_bytes = bits == 64 ? 10 : 5;
    for (int i = 0; i < max_bytes; i++) {
        if (*position >= end)
            return VARINT_CUT;
        unsigned char byte = p[(*position)++];
        raw |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            if (bits == 32 ? raw >> 32 != 0 : i == 9 && byte > 1) /* the bits that do not fit */
                return VARINT_INVALID;
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return VARINT_OK;
        }
    }
    return VARINT_INVALID;
}

static BatchFault refuse_varint(Refusal *refusal, long long index, const char *field, VarintRead read) {
    return refuse_record(refusal, BATCH_INVALID, index, "record %lld: %s %s", index, field,
                         read == VARINT_CUT ? "is cut short" : "is not a valid varint");
}

/* Past the length-prefixed field `what` (length -1: null, where `nullable`) of record `index`,
 * which ends at `end`; its length in `*size`. */
static BatchFault skip_field(const unsigned char *p, int64_t *position, int64_t end, const char *what,
                             long long index, int nullable, int64_t *size, Refusal *refusal) {
    VarintRead read = read_varint(p, position, end, 32, size);
    if (read != VARINT_OK) {
        char field[32];
        snprintf(field, sizeof field, "%s length", what);
        return refuse_varint(refusal, index, field, read);
    }
    if (*size < (nullable ? -1 : 0))
        return refuse_record(refusal, BATCH_INVALID, index, "record %lld: %s length %lld", index, what, (long long)*size);
    if (*size > end - *position)
        return refuse_record(refusal, BATCH_INVALID, index, "record %lld: %s of %lld bytes runs past the record", index,
                             what, (long long)*size);
    if (*size > 0)
        *position += *size;
    return BATCH_OK;
}

static int64_t saturate(__int128 value) {
    return value > INT64_MAX ? INT64_MAX : value < INT64_MIN ? INT64_MIN : (int64_t)value;
}

/* records._check_records_body: every record of the `end` bytes at `p` read as Kafka's
 * DefaultRecord.readFrom and LogValidator.validateRecord do; the records' max timestamp in
 * `*max_timestamp`. No Python calls: runs without the GIL. */
static BatchFault walk_records(const unsigned char *p, int64_t end, long long count, int64_t base_offset,
                               int64_t base_timestamp, const Rules *rules, int64_t now_ms, int64_t *max_timestamp,
                               Refusal *refusal) {
    int64_t position = 0, max_seen = NO_TIMESTAMP;
    BatchFault fault;
    Rejected *rejected = &refusal->rejected;
    rejected->total = rejected->listed = rejected->any_timestamp = 0;
    rejected->base_offset = base_offset;
    rejected->timestamp_low = saturate((__int128)now_ms - rules->timestamp_before_max_ms);
    rejected->timestamp_high = saturate((__int128)now_ms + rules->timestamp_after_max_ms);
    /* bounded by count and by the bytes: each record takes >= 2 of them */
    for (long long index = 0; index < count; index++) {
        int64_t length, timestamp_delta, offset_delta, header_count;
        const char *field = "length";
        VarintRead read;
        if (position >= end)
            return refuse_record(refusal, BATCH_INVALID, index, "record %lld of %lld is missing", index, count);
        if ((read = read_varint(p, &position, end, 32, &length)) != VARINT_OK)
            goto varint_fault;
        if (length < 0 || length > end - position)
            return refuse_record(refusal, BATCH_INVALID, index, "record %lld: length %lld but %lld bytes remain", index,
                                 (long long)length, (long long)(end - position));
        int64_t record_start = position, record_end = position + length;
        field = "attributes";
        if (position >= record_end) {
            read = VARINT_CUT;
            goto varint_fault;
        }
        position++;
        field = "timestamp delta";
        if ((read = read_varint(p, &position, record_end, 64, &timestamp_delta)) != VARINT_OK)
            goto varint_fault;
        field = "offset delta";
        if ((read = read_varint(p, &position, record_end, 32, &offset_delta)) != VARINT_OK)
            goto varint_fault;
        if (offset_delta != index)
            return refuse_record(refusal, BATCH_INVALID, index, "record %lld: offset delta %lld, expected %lld", index,
                                 (long long)offset_delta, index);
        int64_t key_size, size;
        if ((fault = skip_field(p, &position, record_end, "key", index, 1, &key_size, refusal)) != BATCH_OK ||
            (fault = skip_field(p, &position, record_end, "value", index, 1, &size, refusal)) != BATCH_OK)
            return fault;
        field = "header count";
        if ((read = read_varint(p, &position, record_end, 32, &header_count)) != VARINT_OK)
            goto varint_fault;
        if (header_count < 0 || header_count > record_end - position)
            return refuse_record(refusal, BATCH_INVALID, index, "record %lld: header count %lld", index,
                                 (long long)header_count);
        for (int64_t h = 0; h < header_count; h++) { /* bounded: checked against the record's bytes left */
            if ((fault = skip_field(p, &position, record_end, "header key", index, 0, &size, refusal)) != BATCH_OK ||
                (fault = skip_field(p, &position, record_end, "header value", index, 1, &size, refusal)) != BATCH_OK)
                return fault;
        }
        if (position != record_end)
            return refuse_record(refusal, BATCH_INVALID, index, "record %lld: read %lld bytes of its %lld", index,
                                 (long long)(position - record_start), (long long)length);
        int64_t timestamp;
        if (__builtin_add_overflow(base_timestamp, timestamp_delta, &timestamp))
            return refuse_record(refusal, BATCH_INVALID_TIMESTAMP, index,
                                 "record %lld: timestamp delta %lld takes it out of range", index,
                                 (long long)timestamp_delta);
        if (rules->keys_required && key_size < 0) {
            reject_record(rejected, index, REJECTED_NO_KEY);
            continue;
        }
        if (!rules->log_append_time && timestamp != NO_TIMESTAMP &&
            ((__int128)now_ms - timestamp > rules->timestamp_before_max_ms ||
             (__int128)timestamp - now_ms > rules->timestamp_after_max_ms)) {
            reject_record(rejected, index, timestamp);
            continue;
        }
        if (timestamp > max_seen)
            max_seen = timestamp;
        continue;
    varint_fault:
        return refuse_varint(refusal, index, field, read);
    }
    if (position != end)
        return refuse(refusal, BATCH_INVALID, "%lld bytes follow the batch's last record", (long long)(end - position));
    if (rejected->total > 0) {
        snprintf(refusal->message, sizeof refusal->message, "%lld of the batch's records rejected", rejected->total);
        refusal->record_index = -1;
        return refusal->fault = rejected->any_timestamp ? BATCH_INVALID_TIMESTAMP : BATCH_INVALID;
    }
    *max_timestamp = max_seen;
    return BATCH_OK;
}

/* records.check_records: the batch rules of `buf`, then its records read from `body`. */
static BatchFault check_batch_and_records(const unsigned char *buf, Py_ssize_t length, const unsigned char *body,
                                          Py_ssize_t body_length, const Rules *rules, int64_t now_ms,
                                          int64_t *max_timestamp, Refusal *refusal) {
    Header h;
    BatchFault fault = check_producer_batch(buf, length, rules, &h, refusal);
    if (fault != BATCH_OK)
        return fault;
    return walk_records(body, body_length, h.record_count, h.base_offset, read_i64(buf + BASE_TIMESTAMP_POSITION),
                        rules, now_ms, max_timestamp, refusal);
}

/* -- recovery scan of a segment file ------------------------------------------------------------ */

/* records.scan_segment: the file is read forward once, and every byte is either part of a
 * header or fed to its batch's CRC, so a batch of any size costs no more memory than a small one
 * and nothing is read twice. A reader thread fills the next buffer while the scan checks the
 * current one: on a file in the page cache, reading is a copy as long as the CRC, and the two
 * then overlap. The whole scan runs without the GIL. */

#define SCAN_BUFFER_BYTES (1 << 20) /* measured: larger buffers fall out of cache before the CRC */
#define MAX_RELATIVE_OFFSET INT32_MAX
#define PRODUCER_BATCHES_KEPT 5 /* records.PRODUCER_BATCHES_KEPT */

typedef struct {
    unsigned char *data;
    int64_t bytes;
    int filled;
} Chunk;

/* Two chunks: the reader fills one while the scan holds the other. The scan holds at most one at
 * a time and only moves forward, so the reader never waits for a chunk the scan still needs. */
typedef struct {
    int fd;
    Chunk chunks[2];
    int64_t end_position;  /* moves back if the file turns out shorter than the caller said */
    int64_t next_read;     /* the reader's next file position */
    int read_errno;        /* the reader stopped on this error */
    int reader_done;
    int stopping;          /* the scan is done: the reader stops */
    pthread_mutex_t lock;
    pthread_cond_t changed;
} ReadAhead;

/* Fill chunks in turn until the range is read, a read fails or the scan stops. */
static void *read_ahead(void *argument) {
    ReadAhead *reader = argument;
    pthread_mutex_lock(&reader->lock);
    for (int index = 0;; index ^= 1) { /* bounded: each pass reads a chunk or ends */
        Chunk *chunk = &reader->chunks[index];
        while (chunk->filled && !reader->stopping)
            pthread_cond_wait(&reader->changed, &reader->lock);
        if (reader->stopping || reader->next_read >= reader->end_position)
            break;
        int64_t position = reader->next_read;
        int64_t wanted = reader->end_position - position;
        if (wanted > SCAN_BUFFER_BYTES)
            wanted = SCAN_BUFFER_BYTES;
        pthread_mutex_unlock(&reader->lock);
        int64_t got = 0;
        int error = 0;
        while (got < wanted) { /* bounded: each pass reads >= 1 byte or ends */
            ssize_t n = pread(reader->fd, chunk->data + got, (size_t)(wanted - got), (off_t)(position + got));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                error = n < 0 ? errno : 0;
                break;
            }
            got += n;
        }
        pthread_mutex_lock(&reader->lock);
        chunk->bytes = got;
        chunk->filled = 1;
        reader->next_read = position + got;
        pthread_cond_broadcast(&reader->changed);
        if (error) {
            reader->read_errno = error;
            break;
        }
        if (got < wanted) { /* the file ends here */
            reader->end_position = position + got;
            break;
        }
    }
    reader->reader_done = 1;
    pthread_cond_broadcast(&reader->changed);
    pthread_mutex_unlock(&reader->lock);
    return NULL;
}

/* The scan's side: the file as a forward stream of bytes out of the reader's chunks. */
typedef struct {
    ReadAhead *reader;
    int index;            /* the chunk the stream reads next */
    Chunk *held;          /* the chunk it is in, if any */
    int64_t offset;       /* into `held` */
    int64_t end_position; /* the reader's, as of the last chunk taken */
} Stream;

/* Make `held` a chunk with bytes left, waiting for the reader; 0 at the end of the file, -1 with
 * errno set if the reader failed. */
static int stream_next_chunk(Stream *stream) {
    ReadAhead *reader = stream->reader;
    if (stream->held != NULL && stream->offset < stream->held->bytes)
        return 1;
    pthread_mutex_lock(&reader->lock);
    if (stream->held != NULL) {
        stream->held->filled = 0;
        stream->held = NULL;
        stream->index ^= 1;
        pthread_cond_broadcast(&reader->changed);
    }
    Chunk *chunk = &reader->chunks[stream->index];
    while (!chunk->filled && !reader->reader_done)
        pthread_cond_wait(&reader->changed, &reader->lock);
    int outcome = 1;
    stream->end_position = reader->end_position;
    if (!chunk->filled) {
        outcome = reader->read_errno ? -1 : 0;
        errno = reader->read_errno;
    } else {
        stream->held = chunk;
        stream->offset = 0;
    }
    pthread_mutex_unlock(&reader->lock);
    return outcome;
}

/* The next `wanted` bytes, consumed: a pointer into the held chunk, or into `copy` when they cross
 * into the next chunk. `*got` is less than `wanted` only at the end of the file. -1 on a read error. */
static int stream_read(Stream *stream, int64_t wanted, unsigned char *copy, const unsigned char **bytes, int64_t *got) {
    *got = 0;
    int more = stream_next_chunk(stream);
    if (more <= 0) {
        *bytes = copy;
        return more;
    }
    if (stream->held->bytes - stream->offset >= wanted) {
        *bytes = stream->held->data + stream->offset;
        stream->offset += wanted;
        *got = wanted;
        return 0;
    }
    *bytes = copy;
    while (*got < wanted) { /* bounded: at most two chunks, as wanted <= a header */
        if ((more = stream_next_chunk(stream)) <= 0)
            return more;
        int64_t take = stream->held->bytes - stream->offset;
        if (take > wanted - *got)
            take = wanted - *got;
        memcpy(copy + *got, stream->held->data + stream->offset, (size_t)take);
        stream->offset += take;
        *got += take;
    }
    return 0;
}

/* Feed the next `length` bytes to `crc`, consumed; `*got` as stream_read. */
static int stream_crc(Stream *stream, int64_t length, uint32_t *crc, int64_t *got) {
    *got = 0;
    while (*got < length) { /* bounded: each pass takes a chunk's bytes or ends */
        int more = stream_next_chunk(stream);
        if (more <= 0)
            return more;
        int64_t take = stream->held->bytes - stream->offset;
        if (take > length - *got)
            take = length - *got;
        *crc = crc32c_update(*crc, stream->held->data + stream->offset, (size_t)take);
        stream->offset += take;
        *got += take;
    }
    return 0;
}

/* -- what the scanned batches leave of each producer's state ------------------------------------- */

typedef struct {
    int64_t base_offset, max_timestamp;
    int32_t last_offset_delta, base_sequence;
} ProducerBatch;

/* A producer's last PRODUCER_BATCHES_KEPT batches of its last epoch in the scan, oldest at
 * `first`: what replaying ProducerStateManager._record over the scanned batches leaves. */
typedef struct {
    int64_t producer_id; /* NO_PRODUCER_ID: an empty slot */
    int16_t epoch;
    uint8_t epoch_changed; /* within the scan: the producer's earlier state does not carry on */
    uint8_t count, first;
    ProducerBatch batches[PRODUCER_BATCHES_KEPT];
} ProducerRun;

typedef struct {
    ProducerRun *slots; /* open addressing, at most half full */
    size_t capacity, used;
    /* A transactional batch was scanned: runs cannot sum up open transactions and markers, so
     * the scan answers none and the producer state reads the headers instead. */
    int transactional;
} ProducerRuns;

static ProducerRun *producer_slot(ProducerRuns *runs, int64_t producer_id) {
    size_t mask = runs->capacity - 1;
    size_t i = (size_t)((uint64_t)producer_id * 0x9e3779b97f4a7c15ull >> 16) & mask;
    while (runs->slots[i].producer_id != NO_PRODUCER_ID && runs->slots[i].producer_id != producer_id)
        i = (i + 1) & mask; /* bounded: the table is at most half full */
    return &runs->slots[i];
}

static int grow_producer_runs(ProducerRuns *runs) {
    size_t capacity = runs->capacity ? 2 * runs->capacity : 64;
    ProducerRun *slots = malloc(capacity * sizeof(ProducerRun));
    if (slots == NULL)
        return -1;
    for (size_t i = 0; i < capacity; i++)
        slots[i].producer_id = NO_PRODUCER_ID;
    ProducerRuns grown = {slots, capacity, runs->used};
    for (size_t i = 0; i < runs->capacity; i++)
        if (runs->slots[i].producer_id != NO_PRODUCER_ID)
            *producer_slot(&grown, runs->slots[i].producer_id) = runs->slots[i];
    free(runs->slots);
    *runs = grown;
    return 0;
}

typedef struct {
    int64_t producer_id; /* NO_PRODUCER_ID also for a control batch: neither counts */
    int16_t epoch;
    ProducerBatch batch;
} ProducerFields;

static ProducerFields producer_fields(const unsigned char *p) {
    int control = read_i16(p + ATTRIBUTES_POSITION) & CONTROL_BATCH_BIT;
    ProducerFields fields = {control ? NO_PRODUCER_ID : read_i64(p + PRODUCER_ID_POSITION),
                             read_i16(p + PRODUCER_EPOCH_POSITION),
                             {read_i64(p), read_i64(p + MAX_TIMESTAMP_POSITION), read_i32(p + LAST_OFFSET_DELTA_POSITION),
                              read_i32(p + BASE_SEQUENCE_POSITION)}};
    return fields;
}

/* ProducerStateManager._record. -1 on ENOMEM. */
static int record_producer_batch(ProducerRuns *runs, const ProducerFields *fields) {
    if (fields->producer_id == NO_PRODUCER_ID)
        return 0;
    if (2 * (runs->used + 1) > runs->capacity && grow_producer_runs(runs) < 0)
        return -1;
    ProducerRun *run = producer_slot(runs, fields->producer_id);
    if (run->producer_id == NO_PRODUCER_ID) {
        *run = (ProducerRun){fields->producer_id, fields->epoch, 0, 0, 0, {{0}}};
        runs->used++;
    } else if (run->epoch != fields->epoch) {
        run->epoch = fields->epoch;
        run->epoch_changed = 1;
        run->count = run->first = 0;
    }
    ProducerBatch batch = fields->batch;
    if (run->count < PRODUCER_BATCHES_KEPT) {
        run->batches[(run->first + run->count++) % PRODUCER_BATCHES_KEPT] = batch;
    } else {
        run->batches[run->first] = batch;
        run->first = (run->first + 1) % PRODUCER_BATCHES_KEPT;
    }
    return 0;
}

static int compare_producer_runs(const void *a, const void *b) {
    int64_t x = ((const ProducerRun *)a)->producer_id, y = ((const ProducerRun *)b)->producer_id;
    return (x > y) - (x < y);
}

/* [(producer_id, epoch, epoch_changed, ((base_offset, last_offset_delta, max_timestamp,
 * base_sequence), ...)), ...] by producer id, as records._scan_segment_py builds it; None after
 * a transactional batch. */
static PyObject *producer_runs_list(ProducerRuns *runs) {
    if (runs->transactional)
        Py_RETURN_NONE;
    size_t count = 0;
    for (size_t i = 0; i < runs->capacity; i++)
        if (runs->slots[i].producer_id != NO_PRODUCER_ID)
            runs->slots[count++] = runs->slots[i];
    if (count)
        qsort(runs->slots, count, sizeof(ProducerRun), compare_producer_runs);
    PyObject *list = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; list != NULL && i < count; i++) {
        const ProducerRun *run = &runs->slots[i];
        PyObject *batches = PyTuple_New(run->count);
        for (int j = 0; batches != NULL && j < run->count; j++) {
            const ProducerBatch *b = &run->batches[(run->first + j) % PRODUCER_BATCHES_KEPT];
            PyObject *batch = Py_BuildValue("(LiLi)", (long long)b->base_offset, (int)b->last_offset_delta,
                                            (long long)b->max_timestamp, (int)b->base_sequence);
            if (batch == NULL)
                Py_CLEAR(batches);
            else
                PyTuple_SET_ITEM(batches, j, batch);
        }
        PyObject *item = batches == NULL ? NULL
                                         : Py_BuildValue("(LiON)", (long long)run->producer_id, (int)run->epoch,
                                                         run->epoch_changed ? Py_True : Py_False, batches);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* -- the scan ------------------------------------------------------------------------------------ */

typedef struct {
    int64_t *offsets, *positions, *timestamps;
    size_t count, capacity;
} IndexEntries;

static int add_index_entry(IndexEntries *entries, int64_t offset, int64_t position, int64_t timestamp) {
    if (entries->count == entries->capacity) {
        size_t capacity = entries->capacity ? 2 * entries->capacity : 64;
        int64_t *offsets = realloc(entries->offsets, capacity * sizeof(int64_t));
        if (offsets != NULL)
            entries->offsets = offsets;
        int64_t *positions = realloc(entries->positions, capacity * sizeof(int64_t));
        if (positions != NULL)
            entries->positions = positions;
        int64_t *timestamps = realloc(entries->timestamps, capacity * sizeof(int64_t));
        if (timestamps != NULL)
            entries->timestamps = timestamps;
        if (offsets == NULL || positions == NULL || timestamps == NULL)
            return -1;
        entries->capacity = capacity;
    }
    entries->offsets[entries->count] = offset;
    entries->positions[entries->count] = position;
    entries->timestamps[entries->count++] = timestamp;
    return 0;
}

typedef struct {
    int64_t position, next_offset, max_timestamp, index_due_position;
} ScanState;

typedef struct {
    int64_t segment_base_offset, index_interval_bytes, producers_from_offset;
} ScanRules;

/* The scan itself, no Python calls. Returns -1 with errno set on a read error or ENOMEM; else 0,
 * having stopped at the file's end or at the batch `refusal` describes. */
static int scan_file(Stream *stream, const ScanRules *rules, ScanState *state, IndexEntries *entries,
                     ProducerRuns *producers, Refusal *refusal) {
    unsigned char copy[HEADER_SIZE_BYTES];
    /* To the end the caller asked for: a file found shorter is refused where its data runs out. */
    int64_t end_position = stream->end_position;
    refusal->fault = BATCH_OK;
    while (state->position < end_position) { /* bounded: each pass advances >= 61 bytes or ends */
        int64_t position = state->position;
        int64_t remaining = stream->end_position - position;
        const unsigned char *p;
        int64_t got;
        if (stream_read(stream, remaining < HEADER_SIZE_BYTES ? remaining : HEADER_SIZE_BYTES, copy, &p, &got) < 0)
            return -1;
        remaining = stream->end_position - position; /* the read may have found the file shorter */
        Header h = {0};
        if (read_header(p, got < HEADER_SIZE_BYTES ? got : remaining, position, &h, refusal) != BATCH_OK)
            return 0;
        if (h.size_bytes > remaining) {
            refuse_short(refusal, position, h.size_bytes, remaining);
            return 0;
        }
        int64_t last_offset = h.base_offset + h.last_offset_delta;
        /* The base offset is outside the CRC: order and range are all that can be checked of it. */
        if (h.base_offset < state->next_offset) {
            refuse(refusal, BATCH_CORRUPT, "base offset %lld is below next offset %lld", (long long)h.base_offset,
                   (long long)state->next_offset);
            return 0;
        }
        if (last_offset - rules->segment_base_offset > MAX_RELATIVE_OFFSET) {
            refuse(refusal, BATCH_CORRUPT, "offset %lld is out of range of segment %lld", (long long)last_offset,
                   (long long)rules->segment_base_offset);
            return 0;
        }
        /* Taken before the CRC moves the stream on: `p` may lie in a chunk the reader refills. */
        ProducerFields producer = producer_fields(p);
        uint32_t crc = crc32c_update(0, p + CRC_START, HEADER_SIZE_BYTES - CRC_START);
        if (stream_crc(stream, h.size_bytes - HEADER_SIZE_BYTES, &crc, &got) < 0)
            return -1;
        if (got < h.size_bytes - HEADER_SIZE_BYTES) { /* the file shrank under the scan */
            refuse_short(refusal, position, h.size_bytes, stream->end_position - position);
            return 0;
        }
        if (crc != h.crc) {
            refuse_crc(refusal, position, crc, h.crc);
            return 0;
        }
        if (position > state->index_due_position) {
            if (add_index_entry(entries, h.base_offset, position, state->max_timestamp) < 0) {
                errno = ENOMEM;
                return -1;
            }
            state->index_due_position = position + rules->index_interval_bytes;
        }
        if (h.base_offset >= rules->producers_from_offset) {
            if (h.attributes & TRANSACTIONAL_BIT)
                producers->transactional = 1;
            else if (record_producer_batch(producers, &producer) < 0) {
                errno = ENOMEM;
                return -1;
            }
        }
        if (h.max_timestamp > state->max_timestamp)
            state->max_timestamp = h.max_timestamp;
        state->next_offset = last_offset + 1;
        state->position = position + h.size_bytes;
    }
    return 0;
}

static PyObject *int64_list(const int64_t *values, size_t count) {
    PyObject *list = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; list != NULL && i < count; i++) {
        PyObject *value = PyLong_FromLongLong(values[i]);
        if (value == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, value);
    }
    return list;
}

/* Scan with a reader thread when the range needs more than one chunk; a one-chunk range (a
 * segment's tail, most truncations) is read in place, without the thread's start-up cost. */
static int scan_range(ReadAhead *reader, const ScanRules *rules, ScanState *state, IndexEntries *entries,
                      ProducerRuns *producers, Refusal *refusal) {
    pthread_t thread;
    Stream stream = {reader, 0, NULL, 0, reader->end_position};
    int threaded = reader->end_position - reader->next_read > SCAN_BUFFER_BYTES;
    if (threaded) {
        if ((errno = pthread_create(&thread, NULL, read_ahead, reader)) != 0)
            return -1;
    } else {
        read_ahead(reader);
    }
    int scanned = scan_file(&stream, rules, state, entries, producers, refusal);
    int scan_errno = errno;
    if (threaded) {
        pthread_mutex_lock(&reader->lock);
        reader->stopping = 1;
        pthread_cond_broadcast(&reader->changed);
        pthread_mutex_unlock(&reader->lock);
        pthread_join(thread, NULL);
    }
    errno = scan_errno;
    return scanned;
}

static PyObject *scan_segment(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    long long values[9];
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "scan_segment(fd, position, end_position, next_offset, segment_base_offset, "
                                         "index_due_position, index_interval_bytes, max_timestamp, "
                                         "producers_from_offset)");
        return NULL;
    }
    for (int i = 0; i < 9; i++) {
        values[i] = PyLong_AsLongLong(args[i]);
        if (values[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    if (segment_scan_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastbatch.bind() was not called");
        return NULL;
    }
    ReadAhead reader = {.fd = (int)values[0], .end_position = values[2], .next_read = values[1]};
    ScanRules rules = {values[4], values[6], values[8]};
    ScanState state = {values[1], values[3], values[7], values[5]};
    IndexEntries entries = {0};
    ProducerRuns producers = {0};
    Refusal refusal;
    int scanned = -1;
    /* A tail rescan (every segment at a clean open) needs a fraction of a chunk. */
    int64_t range_bytes = values[2] - values[1];
    size_t chunk_bytes = range_bytes < 1 ? 1 : range_bytes < SCAN_BUFFER_BYTES ? (size_t)range_bytes : SCAN_BUFFER_BYTES;
    reader.chunks[0].data = malloc(chunk_bytes);
    reader.chunks[1].data = malloc(chunk_bytes);
    pthread_mutex_init(&reader.lock, NULL);
    pthread_cond_init(&reader.changed, NULL);
    if (reader.chunks[0].data == NULL || reader.chunks[1].data == NULL || grow_producer_runs(&producers) < 0) {
        errno = ENOMEM;
    } else {
        Py_BEGIN_ALLOW_THREADS
        scanned = scan_range(&reader, &rules, &state, &entries, &producers, &refusal);
        Py_END_ALLOW_THREADS
    }
    PyObject *result = NULL;
    if (scanned < 0 && errno == ENOMEM) {
        PyErr_NoMemory();
    } else if (scanned < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
    } else {
        PyObject *items[SEGMENT_SCAN_FIELDS] = {
            PyLong_FromLongLong(state.position),
            PyLong_FromLongLong(state.next_offset),
            PyLong_FromLongLong(state.max_timestamp),
            PyLong_FromLongLong(state.index_due_position),
            int64_list(entries.offsets, entries.count),
            int64_list(entries.positions, entries.count),
            int64_list(entries.timestamps, entries.count),
            producer_runs_list(&producers),
            refusal.fault == BATCH_OK ? Py_NewRef(Py_None) : PyUnicode_FromString(refusal.message),
        };
        result = new_record(segment_scan_type, items, SEGMENT_SCAN_FIELDS);
    }
    pthread_cond_destroy(&reader.changed);
    pthread_mutex_destroy(&reader.lock);
    free(reader.chunks[0].data);
    free(reader.chunks[1].data);
    free(entries.offsets);
    free(entries.positions);
    free(entries.timestamps);
    free(producers.slots);
    return result;
}

static PyObject *validate_batches(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    long long max_batch_bytes;
    Py_buffer buffer;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "validate_batches(buf, max_batch_bytes)");
        return NULL;
    }
    max_batch_bytes = PyLong_AsLongLong(args[1]);
    if (max_batch_bytes == -1 && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &buffer, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = validate(&buffer, max_batch_bytes);
    PyBuffer_Release(&buffer);
    return result;
}

static PyObject *assign_batches(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Rules rules;
    long long first_offset, leader_epoch, now_ms, records_max_timestamp = NO_TIMESTAMP;
    Py_buffer buffer;
    if (nargs != 5 && nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "assign_batches(buf, rules, first_offset, leader_epoch, now_ms, records_max_timestamp=None)");
        return NULL;
    }
    if (read_rules(args[1], &rules) < 0)
        return NULL;
    first_offset = PyLong_AsLongLong(args[2]);
    leader_epoch = PyLong_AsLongLong(args[3]);
    now_ms = PyLong_AsLongLong(args[4]);
    int records_checked = nargs == 6 && args[5] != Py_None;
    if (records_checked)
        records_max_timestamp = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (first_offset < 0 || leader_epoch < INT32_MIN || leader_epoch > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "first offset %lld or leader epoch %lld out of range", first_offset, leader_epoch);
        return NULL;
    }
    if (batch_run_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastbatch.bind() was not called");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &buffer, PyBUF_WRITABLE) < 0)
        return NULL;
    unsigned char *buf = buffer.buf;
    Header h;
    Refusal refusal;
    int64_t max_timestamp = records_max_timestamp;
    PyObject *result = NULL;
    BatchFault fault = check_producer_batch(buf, buffer.len, &rules, &h, &refusal);
    if (fault == BATCH_OK && (h.attributes & CODEC_MASK) == 0) {
        fault = walk_records(buf + HEADER_SIZE_BYTES, h.size_bytes - HEADER_SIZE_BYTES, h.record_count, h.base_offset,
                             read_i64(buf + BASE_TIMESTAMP_POSITION), &rules, now_ms, &max_timestamp, &refusal);
    } else if (fault == BATCH_OK && !records_checked) {
        PyErr_SetString(PyExc_ValueError, "a compressed batch's records must be checked first (check_records)");
        goto done;
    }
    if (fault == BATCH_OK && first_offset > INT64_MAX - h.last_offset_delta - 1)
        fault = refuse(&refusal, BATCH_INVALID, "batch at position 0 would pass the largest offset");
    if (fault != BATCH_OK) {
        raise_refusal(&refusal);
        goto done;
    }
    /* Only once every check passed, so that a refused batch stays as it came. LogValidator sets
     * the max timestamp (batch.setMaxTimestamp), which the time index trusts, to the records' or,
     * for LogAppendTime, to now with the timestamp type: every record then reads it. */
    int attributes = h.attributes;
    if (rules.log_append_time) {
        max_timestamp = now_ms;
        attributes |= LOG_APPEND_TIME_BIT;
    }
    if (h.max_timestamp != max_timestamp || h.attributes != attributes) {
        buf[ATTRIBUTES_POSITION] = (unsigned char)(attributes >> 8);
        buf[ATTRIBUTES_POSITION + 1] = (unsigned char)attributes;
        write_i64(buf + MAX_TIMESTAMP_POSITION, max_timestamp);
        write_u32(buf + CRC_POSITION, crc32c_update(0, buf + CRC_START, (size_t)(h.size_bytes - CRC_START)));
    }
    write_i64(buf, first_offset);
    write_u32(buf + LEADER_EPOCH_POSITION, (uint32_t)leader_epoch);
    PyObject *items[BATCH_RUN_FIELDS] = {PyLong_FromLong(1), PyLong_FromLongLong(first_offset + h.last_offset_delta),
                                         PyLong_FromLongLong(max_timestamp), PyLong_FromLong(h.record_count)};
    result = new_record(batch_run_type, items, BATCH_RUN_FIELDS);
done:
    PyBuffer_Release(&buffer);
    return result;
}

static PyObject *check_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Rules rules;
    Py_buffer batch, body;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "check_records(batch, body, rules, now_ms)");
        return NULL;
    }
    if (read_rules(args[2], &rules) < 0)
        return NULL;
    long long now_ms = PyLong_AsLongLong(args[3]);
    if (now_ms == -1 && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &batch, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &body, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&batch);
        return NULL;
    }
    Refusal refusal;
    int64_t max_timestamp = NO_TIMESTAMP;
    BatchFault fault;
    Py_BEGIN_ALLOW_THREADS
    fault = check_batch_and_records(batch.buf, batch.len, body.buf, body.len, &rules, now_ms, &max_timestamp, &refusal);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&body);
    PyBuffer_Release(&batch);
    if (fault != BATCH_OK) {
        raise_refusal(&refusal);
        return NULL;
    }
    return PyLong_FromLongLong(max_timestamp);
}

static PyObject *crc32c(PyObject *module, PyObject *args) {
    Py_buffer buffer;
    const char *name = NULL;
    uint32_t (*update)(uint32_t, const unsigned char *, size_t) = crc32c_update;
    if (!PyArg_ParseTuple(args, "y*|s:crc32c", &buffer, &name))
        return NULL;
    if (name != NULL) {
        update = NULL;
        for (int i = 0; i < crc32c_count; i++)
            if (strcmp(name, crc32c_names[i]) == 0)
                update = crc32c_functions[i];
        if (update == NULL) {
            PyBuffer_Release(&buffer);
            return PyErr_Format(PyExc_ValueError, "no CRC32C implementation %s on this CPU", name);
        }
    }
    uint32_t crc = update(0, buffer.buf, (size_t)buffer.len);
    PyBuffer_Release(&buffer);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(BatchHeader, BatchRun, SegmentScan, RejectedRecords, CorruptRecordError, InvalidRecordError, RecordTooLargeError, "
     "InvalidTimestampError): the types results and errors are made of."},
    {"validate_batches", (PyCFunction)(void (*)(void))validate_batches, METH_FASTCALL,
     "validate_batches(buf, max_batch_bytes) -> list[BatchHeader], as records.validate_batches."},
    {"assign_batches", (PyCFunction)(void (*)(void))assign_batches, METH_FASTCALL,
     "assign_batches(buf, rules, first_offset, leader_epoch, now_ms, records_max_timestamp=None) -> BatchRun, as "
     "records.assign_batches."},
    {"check_records", (PyCFunction)(void (*)(void))check_records, METH_FASTCALL,
     "check_records(batch, body, rules, now_ms) -> int, as records.check_records."},
    {"scan_segment", (PyCFunction)(void (*)(void))scan_segment, METH_FASTCALL,
     "scan_segment(fd, position, end_position, next_offset, segment_base_offset, index_due_position, "
     "index_interval_bytes, max_timestamp, producers_from_offset) -> SegmentScan, as records.scan_segment."},
    {"crc32c", crc32c, METH_VARARGS,
     "crc32c(data, implementation=None) -> int: CRC32C of a bytes-like object, by the selected implementation or "
     "by the one of CRC32C_IMPLEMENTATIONS named."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_fastbatch", "Compiled fast path of replog.storage.records.", -1, methods,
};

PyMODINIT_FUNC PyInit__fastbatch(void) {
    crc32c_select();
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    PyObject *names = PyTuple_New(crc32c_count);
    for (int i = 0; names != NULL && i < crc32c_count; i++) {
        PyObject *name = PyUnicode_FromString(crc32c_names[i]);
        if (name == NULL)
            Py_CLEAR(names);
        else
            PyTuple_SET_ITEM(names, i, name);
    }
    /* PyModule_AddObject steals the reference only on success. */
    if (names == NULL || PyModule_AddObject(module, "CRC32C_IMPLEMENTATIONS", names) < 0) {
        Py_XDECREF(names);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
