/* quiver._speedups: compiled twins of the per-message hot functions.
 *
 * Each function here has a Python reference of the same name (record.py, message.py, schema.py, protocol.py,
 * the broker's store.py, appending.py, queue_reads.py, consume_queue.py, index_file.py, the Spark source's columns.py) and quiver.wire.speedups picks
 * between them. The contract: a function either returns exactly what its reference
 * returns, or returns NotImplemented and the reference runs instead. Anything unusual
 * (a malformed record, a value out of struct range, an unexpected type or arity) is
 * NotImplemented, so errors keep the reference's exception and message, and no input
 * is read outside its buffer. Byte positions are not written here: the Python modules that
 * own the layouts hand them over at import (`layout`, called by quiver.wire.speedups.layout
 * from record.py, consume_queue.py and index_file.py), and a twin whose layout is missing
 * declines. This file knows the field names and widths it writes; a layout with another
 * field, width or arity is refused, so a format change that needs new C code says so.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#define MAGIC_V1 0xDAA320A7u
#define MAGIC_V2 0xDAA320ABu
#define MAGIC_BLANK 0xCBD43194u
#define SYSFLAG_PROP_CRC (1u << 20)
#define CRC_PROP_BYTES 20
#define HASH_MASK 0x7FFFFFFFu
#define TX_MASK 0xCu
#define TX_NOT 0x0u
#define TX_COMMIT 0x8u

#define NOT_IMPLEMENTED Py_RETURN_NOTIMPLEMENTED

/* ---- layouts, as their Python owners hand them over (see `layout` at the end) -------------
   Set once at import and only read after: upper case, as the constants they stand for. */

typedef struct {
    const char *name;
    Py_ssize_t size;   /* the width this file reads and writes */
    Py_ssize_t *at;    /* where the owner puts it */
} field;

/* the record's fixed part (record._LAYOUT) */
static Py_ssize_t FIXED_SIZE, MIN_RECORD, AT_SIZE, AT_MAGIC, AT_BODY_CRC, AT_QUEUE_ID, AT_FLAG, AT_QOFF,
    AT_PHYS, AT_SYSFLAG, AT_BORN_TS, AT_BORN_HOST, AT_STORE_TS, AT_STORE_HOST, AT_RECONSUME, AT_PREPARED,
    AT_BODY_LEN;
static field record_fields[] = {
    {"size", 4, &AT_SIZE}, {"magic", 4, &AT_MAGIC}, {"body_crc", 4, &AT_BODY_CRC}, {"queue_id", 4, &AT_QUEUE_ID},
    {"flag", 4, &AT_FLAG}, {"queue_offset", 8, &AT_QOFF}, {"phys_offset", 8, &AT_PHYS},
    {"sys_flag", 4, &AT_SYSFLAG}, {"born_ts", 8, &AT_BORN_TS}, {"born_host", 8, &AT_BORN_HOST},
    {"store_ts", 8, &AT_STORE_TS}, {"store_host", 8, &AT_STORE_HOST}, {"reconsume", 4, &AT_RECONSUME},
    {"prepared_offset", 8, &AT_PREPARED}, {"body_len", 4, &AT_BODY_LEN},
};

/* the items of record.RunHead (encode_run's argument) and record.Fields (decode_fields' result) */
enum { H_TOPIC, H_QUEUE_ID, H_FIRST_QOFF, H_PHYS, H_SYS_FLAG, H_BORN_TS, H_BORN_HOST, H_STORE_TS, H_STORE_HOST,
       H_RECONSUME, H_PREPARED, H_COUNT };
static Py_ssize_t H[H_COUNT];
static field head_items[] = {
    {"topic", 0, &H[H_TOPIC]}, {"queue_id", 0, &H[H_QUEUE_ID]}, {"first_qoff", 0, &H[H_FIRST_QOFF]},
    {"phys", 0, &H[H_PHYS]}, {"sys_flag", 0, &H[H_SYS_FLAG]}, {"born_ts", 0, &H[H_BORN_TS]},
    {"born_host", 0, &H[H_BORN_HOST]}, {"store_ts", 0, &H[H_STORE_TS]}, {"store_host", 0, &H[H_STORE_HOST]},
    {"reconsume", 0, &H[H_RECONSUME]}, {"prepared_offset", 0, &H[H_PREPARED]},
};
enum { F_TOPIC, F_BODY, F_PROPS, F_QUEUE_ID, F_FLAG, F_QOFF, F_PHYS, F_SYS_FLAG, F_BORN_TS, F_STORE_TS,
       F_STORE_HOST, F_RECONSUME, F_BODY_CRC, F_COUNT };
static Py_ssize_t F[F_COUNT];
static field fields_items[] = {
    {"topic", 0, &F[F_TOPIC]}, {"body", 0, &F[F_BODY]}, {"props", 0, &F[F_PROPS]},
    {"queue_id", 0, &F[F_QUEUE_ID]}, {"flag", 0, &F[F_FLAG]}, {"queue_offset", 0, &F[F_QOFF]},
    {"phys_offset", 0, &F[F_PHYS]}, {"sys_flag", 0, &F[F_SYS_FLAG]}, {"born_ts", 0, &F[F_BORN_TS]},
    {"store_ts", 0, &F[F_STORE_TS]}, {"store_host", 0, &F[F_STORE_HOST]}, {"reconsume", 0, &F[F_RECONSUME]},
    {"body_crc", 0, &F[F_BODY_CRC]},
};
static PyTypeObject *run_head_type, *fields_type;

/* a ConsumeQueue entry (consume_queue.ENTRY_LAYOUT) */
static Py_ssize_t CQ_ENTRY, CQ_AT_PHYS, CQ_AT_SIZE, CQ_AT_CODE;
static field cq_fields[] = {{"phys_offset", 8, &CQ_AT_PHYS}, {"size", 4, &CQ_AT_SIZE}, {"tags_code", 8, &CQ_AT_CODE}};

/* an IndexFile entry (index_file.ENTRY_LAYOUT), after a header and 4-byte slots */
static Py_ssize_t INDEX_HEADER, INDEX_ENTRY, IX_AT_HASH, IX_AT_PHYS, IX_AT_DIFF, IX_AT_PREV;
static field index_fields[] = {{"key_hash", 4, &IX_AT_HASH}, {"phys_offset", 8, &IX_AT_PHYS},
                               {"time_diff", 4, &IX_AT_DIFF}, {"prev_entry", 4, &IX_AT_PREV}};

/* a MessageExt's slots (quiver.client.message.MessageExt, handed over as layout "message_ext"):
   where each sits in the object, from the type's own member descriptors */
enum { M_TOPIC, M_BODY, M_TAGS, M_KEYS, M_PROPS, M_MSG_ID, M_OFFSET_ID, M_BROKER, M_QUEUE_ID, M_QOFF, M_RECONSUME,
       M_BORN_TS, M_STORE_TS, M_PHYS, M_FLAG, M_SYS_FLAG, M_BODY_CRC, M_STORE_HOST, M_RECEIPT, M_COUNT };
static const char *const msg_slots[M_COUNT] = {
    "topic", "body", "tags", "keys", "properties", "msg_id", "_offset_id", "broker", "queue_id", "queue_offset",
    "reconsume_times", "born_timestamp", "store_timestamp", "commit_log_offset", "flag", "sys_flag", "body_crc",
    "store_host", "receipt_handle",
};
static Py_ssize_t MSG_AT[M_COUNT];
static PyTypeObject *message_type;

/* a protocol.Envelope's slots, and what protocol.decode reads a header with (layout "envelope") */
enum { E_CODE, E_ID, E_EXT, E_BODIES, E_REMARK, E_COUNT };
static const char *const env_slots[E_COUNT] = {"code", "id", "ext", "bodies", "remark"};
static Py_ssize_t ENV_AT[E_COUNT], ENV_MAX_HEADER;
static PyTypeObject *envelope_type;
static PyObject *env_loads, *env_version;

static int record_ready, cq_ready, index_ready, message_ready, envelope_ready;  /* 0: that layout's twins decline */

/* ---- CRC-32 (the zlib polynomial), slicing by 16: as fast as zlib's, no zlib headers -- */

static uint32_t crc_table[16][256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 16; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static inline uint32_t le32(const unsigned char *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#endif
}

#define T(t, x) crc_table[t][(x) & 0xFF]

/* zlib.crc32(data, crc) */
static uint32_t crc32_update(uint32_t crc, const unsigned char *p, Py_ssize_t n)
{
    uint32_t c = ~crc;
    while (n >= 16) {
        uint32_t a = c ^ le32(p), b = le32(p + 4), d = le32(p + 8), e = le32(p + 12);
        c = T(15, a) ^ T(14, a >> 8) ^ T(13, a >> 16) ^ T(12, a >> 24) ^ T(11, b) ^ T(10, b >> 8)
            ^ T(9, b >> 16) ^ T(8, b >> 24) ^ T(7, d) ^ T(6, d >> 8) ^ T(5, d >> 16) ^ T(4, d >> 24)
            ^ T(3, e) ^ T(2, e >> 8) ^ T(1, e >> 16) ^ T(0, e >> 24);
        p += 16;
        n -= 16;
    }
    while (n-- > 0)
        c = T(0, c ^ *p++) ^ (c >> 8);
    return ~c;
}

#undef T

/* ---- big-endian fields ------------------------------------------------------------- */

static inline void put32(unsigned char *p, uint32_t v)
{
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static inline void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static inline uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static inline int32_t get_i32(const unsigned char *p) { return (int32_t)get32(p); }
static inline int64_t get_i64(const unsigned char *p) { return (int64_t)get64(p); }

/* ---- argument helpers: 0 means "leave it to the reference" -------------------------- */

/* an int within [lo, hi] (struct's 'i' / 'q' ranges) */
static int as_int(PyObject *o, long long lo, long long hi, long long *out)
{
    if (!PyLong_Check(o))
        return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

#define I32(o, out) as_int((o), INT32_MIN, INT32_MAX, (out))
#define I64(o, out) as_int((o), INT64_MIN, INT64_MAX, (out))

/* A 1-D contiguous view of unsigned bytes, so that len() and indexing in the reference
   count bytes as this code does. Bytes take the direct path. */
static int byte_view(PyObject *o, Py_buffer *v)
{
    if (PyObject_GetBuffer(o, v, PyBUF_FULL_RO) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (v->ndim != 1 || v->itemsize != 1 || v->suboffsets != NULL || !PyBuffer_IsContiguous(v, 'C')
            || (v->format != NULL && strcmp(v->format, "B") != 0)) {
        PyBuffer_Release(v);
        return 0;
    }
    return 1;
}

/* a list or tuple of exactly n items (zip() in the reference stops at the shortest) */
static int is_seq(PyObject *o, Py_ssize_t n)
{
    return (PyList_CheckExact(o) || PyTuple_CheckExact(o)) && (n < 0 || PySequence_Fast_GET_SIZE(o) == n);
}

/* ---- encode_run ---------------------------------------------------------------------- */

typedef struct {
    Py_buffer view;
    int held;  /* 1: a buffer to release, 2: a bytes object to let go of */
} Held;

static void release_all(Held *h, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (h[i].held == 1)
            PyBuffer_Release(&h[i].view);
        else if (h[i].held == 2)
            Py_DECREF(h[i].view.obj);
    }
}

/* A reference of our own to each input: the GIL is released while they are copied. */
static int hold(PyObject *o, Held *h)
{
    if (PyBytes_CheckExact(o)) {
        h->view.obj = Py_NewRef(o);
        h->view.buf = PyBytes_AS_STRING(o);
        h->view.len = PyBytes_GET_SIZE(o);
        h->held = 2;
        return 1;
    }
    h->held = byte_view(o, &h->view);
    return h->held;
}

static void host8(unsigned char *dst, PyObject *host)
{
    /* struct '8s': cut or zero-padded to 8 bytes */
    Py_ssize_t n = PyBytes_GET_SIZE(host);
    memset(dst, 0, 8);
    memcpy(dst, PyBytes_AS_STRING(host), n < 8 ? n : 8);
}

/* encode_run(head: RunHead, bodies, flags, props, body_crcs=None, prop_crc=False)
   -> (data, phys offsets, sizes); prop_crc runs in Python. */
static PyObject *encode_run(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    if (!record_ready || nargs < 4 || nargs > 6 || !Py_IS_TYPE(a[0], run_head_type))
        NOT_IMPLEMENTED;
#define HEAD(i) PyTuple_GET_ITEM(a[0], H[i])
    PyObject *bodies = a[1], *topic = HEAD(H_TOPIC), *flags = a[2], *first = HEAD(H_FIRST_QOFF);
    PyObject *born_host = HEAD(H_BORN_HOST), *store_host = HEAD(H_STORE_HOST), *props = a[3];
    PyObject *crcs = nargs > 4 ? a[4] : Py_None, *prop_crc = nargs > 5 ? a[5] : Py_False;
    long long queue_id, qoff = 0, phys, sys_flag, born_ts, store_ts, reconsume, prepared;
    if (prop_crc != Py_False || !is_seq(bodies, -1) || !PyBytes_CheckExact(topic)
            || !PyBytes_CheckExact(born_host) || !PyBytes_CheckExact(store_host))
        NOT_IMPLEMENTED;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(bodies);
    if (!is_seq(flags, n) || !is_seq(props, n) || (crcs != Py_None && !is_seq(crcs, n)))
        NOT_IMPLEMENTED;
    if (!I32(HEAD(H_QUEUE_ID), &queue_id) || (first != Py_None && !I64(first, &qoff)) || !I64(HEAD(H_PHYS), &phys)
            || !I32(HEAD(H_SYS_FLAG), &sys_flag) || !I64(HEAD(H_BORN_TS), &born_ts)
            || !I64(HEAD(H_STORE_TS), &store_ts) || !I32(HEAD(H_RECONSUME), &reconsume)
            || !I64(HEAD(H_PREPARED), &prepared))
        NOT_IMPLEMENTED;
#undef HEAD
    Py_ssize_t tlen = PyBytes_GET_SIZE(topic);
    if (tlen > 0xFFFF || (first != Py_None && n && qoff > INT64_MAX - (n - 1)))
        NOT_IMPLEMENTED;
    Py_ssize_t thead = tlen <= 127 ? 1 : 2;
    uint32_t magic = tlen <= 127 ? MAGIC_V1 : MAGIC_V2;
    long long fixed = FIXED_SIZE + thead + tlen + 2;

    Held *held = PyMem_Calloc(2 * (size_t)n + 1, sizeof(Held));
    int32_t *ints = PyMem_Malloc((2 * (size_t)n + 1) * sizeof(int32_t));  /* flags, then crcs */
    PyObject *out = NULL, *offsets = NULL, *sizes = NULL, *data = NULL;
    if (held == NULL || ints == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    long long total = 0, end = phys;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long f, c = 0;
        if (!hold(PySequence_Fast_GET_ITEM(bodies, i), &held[2 * i])
                || !hold(PySequence_Fast_GET_ITEM(props, i), &held[2 * i + 1]))
            goto not_mine;
        long long size = fixed + held[2 * i].view.len + held[2 * i + 1].view.len;
        if (held[2 * i + 1].view.len > 0xFFFF || size > INT32_MAX || end > INT64_MAX - size
                || !I32(PySequence_Fast_GET_ITEM(flags, i), &f)
                || (crcs != Py_None && !I32(PySequence_Fast_GET_ITEM(crcs, i), &c)))
            goto not_mine;
        ints[2 * i] = (int32_t)f;
        ints[2 * i + 1] = (int32_t)c;
        total += size;
        end += size;
    }
    if (total > PY_SSIZE_T_MAX)
        goto not_mine;
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    offsets = PyList_New(n);
    sizes = PyList_New(n);
    if (data == NULL || offsets == NULL || sizes == NULL)
        goto done;
    long long at = phys;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long size = fixed + held[2 * i].view.len + held[2 * i + 1].view.len;
        PyObject *o = PyLong_FromLongLong(at), *s = PyLong_FromLongLong(size);
        if (o == NULL || s == NULL) {
            Py_XDECREF(o);
            Py_XDECREF(s);
            goto done;
        }
        PyList_SET_ITEM(offsets, i, o);
        PyList_SET_ITEM(sizes, i, s);
        at += size;
    }
    unsigned char hosts[16];
    host8(hosts, born_host);
    host8(hosts + 8, store_host);
    const unsigned char *tb = (const unsigned char *)PyBytes_AS_STRING(topic);
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(data);
    Py_BEGIN_ALLOW_THREADS  /* the new bytes are ours alone; the flush thread may run meanwhile */
    at = phys;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *body = held[2 * i].view.buf, *pb = held[2 * i + 1].view.buf;
        Py_ssize_t blen = held[2 * i].view.len, plen = held[2 * i + 1].view.len;
        uint32_t size = (uint32_t)(fixed + blen + plen);
        uint32_t crc = crcs == Py_None ? crc32_update(0, body, blen) & HASH_MASK : (uint32_t)ints[2 * i + 1];
        put32(w + AT_SIZE, size);
        put32(w + AT_MAGIC, magic);
        put32(w + AT_BODY_CRC, crc);
        put32(w + AT_QUEUE_ID, (uint32_t)queue_id);
        put32(w + AT_FLAG, (uint32_t)ints[2 * i]);
        put64(w + AT_QOFF, first == Py_None ? 0 : (uint64_t)(qoff + i));
        put64(w + AT_PHYS, (uint64_t)at);
        put32(w + AT_SYSFLAG, (uint32_t)sys_flag);
        put64(w + AT_BORN_TS, (uint64_t)born_ts);
        memcpy(w + AT_BORN_HOST, hosts, 8);
        put64(w + AT_STORE_TS, (uint64_t)store_ts);
        memcpy(w + AT_STORE_HOST, hosts + 8, 8);
        put32(w + AT_RECONSUME, (uint32_t)reconsume);
        put64(w + AT_PREPARED, (uint64_t)prepared);
        put32(w + AT_BODY_LEN, (uint32_t)blen);
        w += FIXED_SIZE;
        memcpy(w, body, blen);
        w += blen;
        if (thead == 1) {
            *w++ = (unsigned char)tlen;
        } else {
            *w++ = (unsigned char)(tlen >> 8);
            *w++ = (unsigned char)tlen;
        }
        memcpy(w, tb, tlen);
        w += tlen;
        *w++ = (unsigned char)(plen >> 8);
        *w++ = (unsigned char)plen;
        memcpy(w, pb, plen);
        w += plen;
        at += size;
    }
    Py_END_ALLOW_THREADS
    out = PyTuple_Pack(3, data, offsets, sizes);
    goto done;
not_mine:
    out = Py_NewRef(Py_NotImplemented);
done:
    if (held != NULL)
        release_all(held, 2 * n);
    PyMem_Free(held);
    PyMem_Free(ints);
    Py_XDECREF(data);
    Py_XDECREF(offsets);
    Py_XDECREF(sizes);
    return out;
}

/* ---- walking a pull reply (decode_fields, record_columns) ------------------------------ */

/* Where the parts of one record lie, as record.decode_fields reads them. */
typedef struct {
    Py_ssize_t end, body_at, blen, topic_at, tlen, props_at, plen;
    int blank;
} span;

/* The record at b[pos:end]: 1 with its parts in *s (a BLANK filler: s->blank and s->end only),
   0 when it is not whole and well framed (the caller declines: the reference says why). */
static int span_at(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, span *s)
{
    if (end - pos < FIXED_SIZE)
        return 0;
    const unsigned char *r = b + pos;
    int32_t total = get_i32(r + AT_SIZE);
    uint32_t magic = get32(r + AT_MAGIC);
    s->blank = magic == MAGIC_BLANK;
    if (s->blank) {
        s->end = pos + total;
        return total >= 8;
    }
    int32_t blen = get_i32(r + AT_BODY_LEN);
    if ((magic != MAGIC_V1 && magic != MAGIC_V2) || total < MIN_RECORD || total > end - pos || blen < 0)
        return 0;
    Py_ssize_t rec_end = pos + total, p = pos + FIXED_SIZE;
    if (blen > rec_end - p)
        return 0;
    s->body_at = p;
    s->blen = blen;
    p += blen;
    if (magic == MAGIC_V1) {
        if (p + 1 > rec_end)
            return 0;
        s->tlen = b[p];
        p += 1;
    } else {
        if (p + 2 > rec_end)
            return 0;
        s->tlen = b[p] << 8 | b[p + 1];
        p += 2;
    }
    if (s->tlen > rec_end - p)
        return 0;
    s->topic_at = p;
    p += s->tlen;
    if (p + 2 > rec_end)
        return 0;
    s->plen = b[p] << 8 | b[p + 1];
    s->props_at = p + 2;
    s->end = rec_end;
    return s->props_at + s->plen == rec_end;
}

/* The topic str of a record, decoded only when its bytes differ from the last record's (most
   replies hold one topic): *topic is replaced then. 0 when not UTF-8 (the caller declines). */
typedef struct {
    PyObject *str;
    const unsigned char *bytes;
    Py_ssize_t len;
} topic_cache;

static int topic_of(const unsigned char *b, const span *s, topic_cache *t)
{
    if (t->str != NULL && s->tlen == t->len && memcmp(t->bytes, b + s->topic_at, s->tlen) == 0)
        return 1;
    PyObject *str = PyUnicode_DecodeUTF8((const char *)b + s->topic_at, s->tlen, "strict");
    if (str == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_XSETREF(t->str, str);
    t->bytes = b + s->topic_at;
    t->len = s->tlen;
    return 1;
}

/* ---- decode_fields --------------------------------------------------------------------- */

/* The record.Fields of the record at b[pos:] with parts `s`, built as tuple.__new__ builds
   it (no Python call); takes `props`. NULL on failure. */
static PyObject *fields_of(const unsigned char *b, Py_ssize_t pos, const span *s, PyObject *topic, PyObject *props)
{
    const unsigned char *r = b + pos;
    PyObject *t = fields_type->tp_alloc(fields_type, F_COUNT);
    if (t == NULL) {
        Py_DECREF(props);
        return NULL;
    }
    PyObject *item[F_COUNT] = {
        [F_TOPIC] = Py_NewRef(topic), [F_PROPS] = props,
        [F_BODY] = PyBytes_FromStringAndSize((const char *)b + s->body_at, s->blen),
        [F_QUEUE_ID] = PyLong_FromLong(get_i32(r + AT_QUEUE_ID)), [F_FLAG] = PyLong_FromLong(get_i32(r + AT_FLAG)),
        [F_QOFF] = PyLong_FromLongLong(get_i64(r + AT_QOFF)), [F_PHYS] = PyLong_FromLongLong(get_i64(r + AT_PHYS)),
        [F_SYS_FLAG] = PyLong_FromLong(get_i32(r + AT_SYSFLAG)),
        [F_BORN_TS] = PyLong_FromLongLong(get_i64(r + AT_BORN_TS)),
        [F_STORE_TS] = PyLong_FromLongLong(get_i64(r + AT_STORE_TS)),
        [F_STORE_HOST] = PyBytes_FromStringAndSize((const char *)r + AT_STORE_HOST, 8),
        [F_RECONSUME] = PyLong_FromLong(get_i32(r + AT_RECONSUME)),
        [F_BODY_CRC] = PyLong_FromLong(get_i32(r + AT_BODY_CRC)),
    };
    int ok = 1;
    for (int i = 0; i < F_COUNT; i++) {
        ok &= item[i] != NULL;
        PyTuple_SET_ITEM(t, F[i], item[i]);  /* a NULL item is skipped when t is freed */
    }
    if (!ok)
        Py_CLEAR(t);
    return t;
}

/* One record's object, built from its parts; NULL on failure (a UnicodeDecodeError: the
   reference's business, the walk declines). */
typedef PyObject *(*record_fn)(const unsigned char *b, Py_ssize_t pos, const span *s, PyObject *topic,
                               PyObject *arg);

/* [fn(record), ...] of every record of the reply `buf`, BLANK fillers skipped; NotImplemented
   when a record is not whole or not UTF-8 where it must be. */
static PyObject *walk(PyObject *buf, record_fn fn, PyObject *arg)
{
    Py_buffer v;
    if (!byte_view(buf, &v))
        NOT_IMPLEMENTED;
    const unsigned char *b = v.buf;
    Py_ssize_t pos = 0, end = v.len;
    PyObject *out = PyList_New(0);
    topic_cache topic = {NULL, NULL, 0};
    if (out == NULL)
        goto fail;
    while (pos < end) {
        span s = {0};  /* set by span_at before any use; zeroed for the compiler */
        if (!span_at(b, pos, end, &s))
            goto not_mine;
        if (s.blank) {
            pos = s.end;
            continue;
        }
        if (!topic_of(b, &s, &topic))
            goto not_mine;
        PyObject *t = fn(b, pos, &s, topic.str, arg);
        if (t == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                goto fail;
            PyErr_Clear();
            goto not_mine;
        }
        int err = PyList_Append(out, t);
        Py_DECREF(t);
        if (err < 0)
            goto fail;
        pos = s.end;
    }
    Py_XDECREF(topic.str);
    PyBuffer_Release(&v);
    return out;
not_mine:
    Py_XDECREF(topic.str);
    Py_XDECREF(out);
    PyBuffer_Release(&v);
    NOT_IMPLEMENTED;
fail:
    Py_XDECREF(topic.str);
    Py_XDECREF(out);
    PyBuffer_Release(&v);
    return NULL;
}

static PyObject *fields_record(const unsigned char *b, Py_ssize_t pos, const span *s, PyObject *topic, PyObject *arg)
{
    PyObject *props = PyUnicode_DecodeUTF8((const char *)b + s->props_at, s->plen, "strict");
    return props == NULL ? NULL : fields_of(b, pos, s, topic, props);
}

/* decode_fields(buf) -> [record.Fields, ...] */
static PyObject *decode_fields(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    if (!record_ready || nargs != 1)
        NOT_IMPLEMENTED;
    return walk(a[0], fields_record, NULL);
}

/* ---- decode_messages (quiver.client.message.decode_messages) ------------------------------ */

static PyObject *parse_properties(PyObject *self, PyObject *const *a, Py_ssize_t nargs);

/* "__CRC32#\x01": the store's record CRC property, which a client's properties leave out */
#define CRC_HEAD "__CRC32#\x01"

/* offset_msg_id(store_host, phys): the 16 bytes as 32 upper-case hex digits */
static PyObject *offset_id(const unsigned char *host, int64_t phys)
{
    static const char hex[] = "0123456789ABCDEF";
    unsigned char raw[16];
    char out[32];
    memcpy(raw, host, 8);
    put64(raw + 8, (uint64_t)phys);
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    return PyUnicode_FromStringAndSize(out, 32);
}

/* record.client_properties(props): the map without a trailing __CRC32# item; NULL on failure */
static PyObject *client_props(PyObject *props)
{
    static PyObject *head;
    if (head == NULL && (head = PyUnicode_InternFromString(CRC_HEAD)) == NULL)
        return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(props);
    PyObject *s = Py_NewRef(props);
    if (n >= CRC_PROP_BYTES) {
        Py_ssize_t at = n - CRC_PROP_BYTES;  /* s[-20:-11] == "__CRC32#\x01": s[:-20] */
        Py_ssize_t hit = PyUnicode_Tailmatch(props, head, at, at + (Py_ssize_t)sizeof CRC_HEAD - 1, -1);
        if (hit == 1)
            Py_SETREF(s, PyUnicode_Substring(props, 0, at));
        if (hit < 0 || s == NULL) {
            Py_XDECREF(s);
            return NULL;
        }
    }
    PyObject *out = parse_properties(NULL, &s, 1);
    Py_DECREF(s);
    return out;
}

/* The MessageExt of the record at b[pos:] with parts `s`: its slots written as its __init__
   writes them. NULL on failure. */
static PyObject *message_of(const unsigned char *b, Py_ssize_t pos, const span *s, PyObject *topic,
                            PyObject *broker)
{
    static PyObject *k_tags, *k_keys, *k_uniq, *space;
    if (k_tags == NULL && ((k_tags = PyUnicode_InternFromString("TAGS")) == NULL
            || (k_keys = PyUnicode_InternFromString("KEYS")) == NULL
            || (k_uniq = PyUnicode_InternFromString("UNIQ_KEY")) == NULL
            || (space = PyUnicode_InternFromString(" ")) == NULL))
        return NULL;
    const unsigned char *r = b + pos;
    PyObject *props = PyUnicode_DecodeUTF8((const char *)b + s->props_at, s->plen, "strict");
    PyObject *map = props == NULL ? NULL : client_props(props);
    Py_XDECREF(props);
    if (map == NULL)
        return NULL;
    PyObject *tags = PyDict_GetItemWithError(map, k_tags), *keys = PyDict_GetItemWithError(map, k_keys);
    PyObject *uniq = PyDict_GetItemWithError(map, k_uniq);
    if (PyErr_Occurred()) {
        Py_DECREF(map);
        return NULL;
    }
    PyObject *obj = message_type->tp_alloc(message_type, 0);
    if (obj == NULL) {
        Py_DECREF(map);
        return NULL;
    }
    PyObject *item[M_COUNT] = {
        [M_TOPIC] = Py_NewRef(topic),
        [M_BODY] = PyBytes_FromStringAndSize((const char *)b + s->body_at, s->blen),
        [M_TAGS] = Py_NewRef(tags != NULL ? tags : Py_None),
        [M_KEYS] = keys != NULL && PyUnicode_GET_LENGTH(keys) ? PyUnicode_Split(keys, space, -1) : PyList_New(0),
        [M_PROPS] = map,
        [M_MSG_ID] = uniq != NULL && PyUnicode_GET_LENGTH(uniq) ? Py_NewRef(uniq)
                                                                : offset_id(r + AT_STORE_HOST, get_i64(r + AT_PHYS)),
        [M_OFFSET_ID] = Py_NewRef(Py_None), [M_BROKER] = Py_NewRef(broker),
        [M_QUEUE_ID] = PyLong_FromLong(get_i32(r + AT_QUEUE_ID)), [M_QOFF] = PyLong_FromLongLong(get_i64(r + AT_QOFF)),
        [M_RECONSUME] = PyLong_FromLong(get_i32(r + AT_RECONSUME)),
        [M_BORN_TS] = PyLong_FromLongLong(get_i64(r + AT_BORN_TS)),
        [M_STORE_TS] = PyLong_FromLongLong(get_i64(r + AT_STORE_TS)),
        [M_PHYS] = PyLong_FromLongLong(get_i64(r + AT_PHYS)), [M_FLAG] = PyLong_FromLong(get_i32(r + AT_FLAG)),
        [M_SYS_FLAG] = PyLong_FromLong(get_i32(r + AT_SYSFLAG)),
        [M_BODY_CRC] = PyLong_FromLong(get_i32(r + AT_BODY_CRC)),
        [M_STORE_HOST] = PyBytes_FromStringAndSize((const char *)r + AT_STORE_HOST, 8),
        [M_RECEIPT] = Py_NewRef(Py_None),
    };
    int ok = 1;
    for (int i = 0; i < M_COUNT; i++) {
        ok &= item[i] != NULL;
        *(PyObject **)((char *)obj + MSG_AT[i]) = item[i];  /* a NULL slot is skipped when obj is freed */
    }
    if (!ok)
        Py_CLEAR(obj);
    return obj;
}

/* decode_messages(buf, broker) -> [MessageExt, ...] */
static PyObject *decode_messages(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    if (!record_ready || !message_ready || nargs != 2 || !PyUnicode_CheckExact(a[1]))
        NOT_IMPLEMENTED;
    return walk(a[0], message_of, a[1]);
}

/* ---- record_columns (the Spark source's pull replies as column lists) ----------------- */

#define RC_COLUMNS 14
enum { RC_TOPIC, RC_QUEUE_ID, RC_QOFF, RC_PHYS, RC_BORN_TS, RC_STORE_TS, RC_STORE_HOST, RC_BODY,
       RC_TAGS, RC_UNIQ, RC_KEYS, RC_PROP_ENDS, RC_PROP_NAMES, RC_PROP_VALUES };

/* Append `o` (a new reference, stolen) to list `l`; 0 on failure. */
static int rc_add(PyObject *l, PyObject *o)
{
    if (o == NULL)
        return 0;
    int err = PyList_Append(l, o);
    Py_DECREF(o);
    return err == 0;
}

/* One record's properties (a str) into the flat name / value columns and its TAGS, UNIQ_KEY
   and KEYS (the last of each, or None), as the reference: the store's __CRC32# dropped by name
   (record.strip_prop_crc), empty items skipped, an item without \x01 a name with value "". */
static int rc_props(PyObject *s, PyObject **cols)
{
    static const char crc_head[] = "__CRC32#\x01";
    Py_ssize_t n = PyUnicode_GET_LENGTH(s), i = 0;
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (n >= CRC_PROP_BYTES) {
        int is_crc = 1;
        for (Py_ssize_t j = 0; j < 9 && is_crc; j++)
            is_crc = PyUnicode_READ(kind, data, n - CRC_PROP_BYTES + j) == (Py_UCS4)(unsigned char)crc_head[j];
        if (is_crc)
            n -= CRC_PROP_BYTES;
    }
    PyObject *found[3] = {Py_None, Py_None, Py_None};   /* TAGS, UNIQ_KEY, KEYS: borrowed from the lists */
    while (i < n) {
        Py_ssize_t stop = PyUnicode_FindChar(s, 0x02, i, n, 1), sep;
        if (stop == -2)
            return 0;
        if (stop < 0)
            stop = n;
        if (stop > i) {
            if ((sep = PyUnicode_FindChar(s, 0x01, i, stop, 1)) == -2)
                return 0;
            PyObject *k = PyUnicode_Substring(s, i, sep < 0 ? stop : sep);
            PyObject *v = sep < 0 ? PyUnicode_New(0, 0) : PyUnicode_Substring(s, sep + 1, stop);
            if (k == NULL || v == NULL) {
                Py_XDECREF(k);
                Py_XDECREF(v);
                return 0;
            }
            int which = PyUnicode_CompareWithASCIIString(k, "TAGS") == 0 ? 0
                : PyUnicode_CompareWithASCIIString(k, "UNIQ_KEY") == 0 ? 1
                : PyUnicode_CompareWithASCIIString(k, "KEYS") == 0 ? 2 : -1;
            if (which >= 0)
                found[which] = v;   /* the values list keeps it alive */
            if (!rc_add(cols[RC_PROP_NAMES], k)) {
                Py_DECREF(v);
                return 0;
            }
            if (!rc_add(cols[RC_PROP_VALUES], v))
                return 0;
        }
        i = stop + 1;
    }
    return PyList_Append(cols[RC_TAGS], found[0]) == 0 && PyList_Append(cols[RC_UNIQ], found[1]) == 0
        && PyList_Append(cols[RC_KEYS], found[2]) == 0
        && rc_add(cols[RC_PROP_ENDS], PyLong_FromSsize_t(PyList_GET_SIZE(cols[RC_PROP_NAMES])));
}

/* record_columns(buf) -> 14 lists (quiver.spark.columns.COLUMNS). Declines what
   decode_fields declines: the reference then raises its BadRecord. */
static PyObject *record_columns(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    Py_buffer v;
    if (!record_ready || nargs != 1 || !byte_view(a[0], &v))
        NOT_IMPLEMENTED;
    const unsigned char *b = v.buf;
    Py_ssize_t pos = 0, end = v.len;
    PyObject *cols[RC_COLUMNS] = {NULL}, *out = NULL;
    topic_cache topic = {NULL, NULL, 0};
    int declined = 1;
    for (int c = 0; c < RC_COLUMNS; c++)
        if ((cols[c] = PyList_New(0)) == NULL)
            goto fail;
    while (pos < end) {
        span s = {0};  /* set by span_at before any use; zeroed for the compiler */
        if (!span_at(b, pos, end, &s))
            goto done;
        if (s.blank) {
            pos = s.end;
            continue;
        }
        const unsigned char *r = b + pos;
        if (!topic_of(b, &s, &topic))
            goto done;
        PyObject *props = PyUnicode_DecodeUTF8((const char *)b + s.props_at, s.plen, "strict");
        if (props == NULL) {
            PyErr_Clear();
            goto done;
        }
        int ok = rc_props(props, cols);
        Py_DECREF(props);
        if (!ok || PyList_Append(cols[RC_TOPIC], topic.str) < 0
                || !rc_add(cols[RC_QUEUE_ID], PyLong_FromLong(get_i32(r + AT_QUEUE_ID)))
                || !rc_add(cols[RC_QOFF], PyLong_FromLongLong(get_i64(r + AT_QOFF)))
                || !rc_add(cols[RC_PHYS], PyLong_FromLongLong(get_i64(r + AT_PHYS)))
                || !rc_add(cols[RC_BORN_TS], PyLong_FromLongLong(get_i64(r + AT_BORN_TS)))
                || !rc_add(cols[RC_STORE_TS], PyLong_FromLongLong(get_i64(r + AT_STORE_TS)))
                || !rc_add(cols[RC_STORE_HOST], PyBytes_FromStringAndSize((const char *)r + AT_STORE_HOST, 8))
                || !rc_add(cols[RC_BODY], PyBytes_FromStringAndSize((const char *)b + s.body_at, s.blen)))
            goto fail;
        pos = s.end;
    }
    if ((out = PyTuple_New(RC_COLUMNS)) == NULL)
        goto fail;
    for (int c = 0; c < RC_COLUMNS; c++) {
        PyTuple_SET_ITEM(out, c, cols[c]);
        cols[c] = NULL;
    }
    declined = 0;
    goto done;
fail:
    declined = 0;
done:
    for (int c = 0; c < RC_COLUMNS; c++)
        Py_XDECREF(cols[c]);
    Py_XDECREF(topic.str);
    PyBuffer_Release(&v);
    if (declined)
        NOT_IMPLEMENTED;
    return out;
}

/* ---- check_run ------------------------------------------------------------------------- */

/* The __CRC32# property ending the record [p, end) matches its bytes (record._prop_crc_ok). */
static int prop_crc_ok(const unsigned char *b, Py_ssize_t p, Py_ssize_t end)
{
    static const char head[] = "__CRC32#\x01";
    if (end - p < MIN_RECORD + CRC_PROP_BYTES || memcmp(b + end - CRC_PROP_BYTES, head, 9) != 0)
        return 0;
    uint64_t want = 0;
    for (Py_ssize_t i = end - 2; i >= end - 11; i--) {  /* ten digits, least significant first */
        unsigned char d = b[i];
        if (d < '0' || d > '9')
            return 0;
        want = want * 10 + (d - '0');
    }
    return want == (crc32_update(0, b + p, end - CRC_PROP_BYTES - p) & HASH_MASK);
}

/* check_run(buf, spans, base) -> [] when every record of spans is whole and intact;
   NotImplemented otherwise (the reference then says which and why: the rare path). */
static PyObject *check_run(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    Py_buffer v;
    long long base;
    if (!record_ready || nargs != 3 || !is_seq(a[1], -1) || !I64(a[2], &base))
        NOT_IMPLEMENTED;
    if (!byte_view(a[0], &v))
        NOT_IMPLEMENTED;
    PyObject *spans = a[1];
    Py_ssize_t count = PySequence_Fast_GET_SIZE(spans);
    long long *pairs = PyMem_Malloc((2 * (size_t)count + 1) * sizeof(long long));
    int ok = pairs != NULL;
    for (Py_ssize_t i = 0; ok && i < count; i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(spans, i);
        ok = PyTuple_CheckExact(s) && PyTuple_GET_SIZE(s) == 2 && I64(PyTuple_GET_ITEM(s, 0), &pairs[2 * i])
             && I32(PyTuple_GET_ITEM(s, 1), &pairs[2 * i + 1]);
    }
    if (ok) {
        const unsigned char *b = v.buf;
        Py_ssize_t n = v.len;
        Py_BEGIN_ALLOW_THREADS  /* CRCs of whole bodies: let the flush thread run */
        for (Py_ssize_t i = 0; ok && i < count; i++) {
            long long phys = pairs[2 * i], size = pairs[2 * i + 1];
            if (phys < base || phys - base > n || size < MIN_RECORD || size > n - (phys - base)) {
                ok = 0;
                break;
            }
            Py_ssize_t pos = (Py_ssize_t)(phys - base), end = pos + (Py_ssize_t)size;
            const unsigned char *r = b + pos;
            uint32_t magic = get32(r + AT_MAGIC);
            int32_t blen = get_i32(r + AT_BODY_LEN);
            uint32_t sys_flag = get32(r + AT_SYSFLAG);
            if (get_i32(r + AT_SIZE) != size || get_i64(r + AT_PHYS) != phys || (magic != MAGIC_V1 && magic != MAGIC_V2)
                    || blen < 0 || blen > end - pos - FIXED_SIZE - 3) {
                ok = 0;
                break;
            }
            Py_ssize_t p = pos + FIXED_SIZE + blen;
            if (sys_flag & SYSFLAG_PROP_CRC ? !prop_crc_ok(b, pos, end)
                    : (crc32_update(0, b + p - blen, blen) & HASH_MASK) != (uint32_t)get_i32(r + AT_BODY_CRC)) {
                ok = 0;
                break;
            }
            p += magic == MAGIC_V1 ? 1 + b[p] : 2 + (b[p] << 8 | b[p + 1]);
            if (p + 2 > end || p + 2 + (b[p] << 8 | b[p + 1]) != end)
                ok = 0;
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(pairs);
    PyBuffer_Release(&v);
    if (!ok)
        NOT_IMPLEMENTED;
    return PyList_New(0);
}

/* settled_run(buf, rel, pos, end, last_start, queue_next) -> bytes of the records recovery
   passes over (record.settled_run): framing, check_run's checks and the queue's next offset,
   record by record; NotImplemented on anything unusual (the reference then runs). */
static PyObject *settled_run(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    Py_buffer v;
    long long rel, pos, end, last_start;
    if (!record_ready || nargs != 6 || !I64(a[1], &rel) || !I64(a[2], &pos) || !I64(a[3], &end) || !I64(a[4], &last_start)
            || !PyDict_CheckExact(a[5]) || rel < 0 || pos > INT64_MAX / 2 || pos < INT64_MIN / 2)
        NOT_IMPLEMENTED;
    if (!byte_view(a[0], &v))
        NOT_IMPLEMENTED;
    const unsigned char *b = v.buf;
    Py_ssize_t n = v.len, p = (Py_ssize_t)(rel < n ? rel : n);
    long long at = pos;
    int ok = rel <= n;
    while (ok && p + 8 <= n && at <= last_start) {
        const unsigned char *r = b + p;
        int32_t size = get_i32(r + AT_SIZE);
        uint32_t magic = get32(r + AT_MAGIC);
        if ((magic != MAGIC_V1 && magic != MAGIC_V2) || size < MIN_RECORD || size > n - p || at + size > end)
            break;
        Py_ssize_t rend = p + size;
        int32_t blen = get_i32(r + AT_BODY_LEN);
        uint32_t sys_flag = get32(r + AT_SYSFLAG);
        if (get_i64(r + AT_PHYS) != at || blen < 0 || blen > size - FIXED_SIZE - 3)
            break;
        Py_ssize_t t = p + FIXED_SIZE + blen;
        if (sys_flag & SYSFLAG_PROP_CRC ? !prop_crc_ok(b, p, rend)
                : (crc32_update(0, b + t - blen, blen) & HASH_MASK) != (uint32_t)get_i32(r + AT_BODY_CRC))
            break;
        Py_ssize_t tlen = magic == MAGIC_V1 ? b[t] : (b[t] << 8 | b[t + 1]);
        Py_ssize_t topic_at = t + (magic == MAGIC_V1 ? 1 : 2);
        Py_ssize_t q = topic_at + tlen;
        if (q + 2 > rend || q + 2 + (b[q] << 8 | b[q + 1]) != rend)
            break;
        uint32_t tx = sys_flag & TX_MASK;
        if (tx == TX_NOT || tx == TX_COMMIT) {
            PyObject *key = Py_BuildValue("(y#i)", (const char *)b + topic_at, tlen, get_i32(r + AT_QUEUE_ID));
            if (key == NULL) {
                PyErr_Clear();
                ok = 0;
                break;
            }
            PyObject *nxt = PyDict_GetItemWithError(a[5], key);
            Py_DECREF(key);
            long long want;
            if (nxt == NULL && PyErr_Occurred()) {
                PyErr_Clear();
                ok = 0;
                break;
            }
            if (nxt != NULL) {
                if (!I64(nxt, &want)) {   /* not an int in range: the reference compares it */
                    ok = 0;
                    break;
                }
                if (get_i64(r + AT_QOFF) >= want)
                    break;
            }
        }
        p = rend;
        at += size;
    }
    PyBuffer_Release(&v);
    if (!ok)
        NOT_IMPLEMENTED;
    return PyLong_FromLongLong(at - pos);
}

/* ---- properties ------------------------------------------------------------------------ */

/* parse_properties(s) -> {name: value} of "name\x01value\x02" items (record.parse_properties) */
static PyObject *parse_properties(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    if (nargs != 1 || !PyUnicode_CheckExact(a[0]))
        NOT_IMPLEMENTED;
    PyObject *s = a[0], *out = PyDict_New();
    if (out == NULL)
        return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s), i = 0;
    while (i < n) {
        Py_ssize_t stop = PyUnicode_FindChar(s, 0x02, i, n, 1), sep;
        if (stop == -2)
            goto fail;
        if (stop < 0)
            stop = n;
        if (stop > i) {  /* empty items are skipped */
            if ((sep = PyUnicode_FindChar(s, 0x01, i, stop, 1)) == -2)
                goto fail;
            PyObject *k = PyUnicode_Substring(s, i, sep < 0 ? stop : sep);
            PyObject *v = sep < 0 ? PyUnicode_New(0, 0) : PyUnicode_Substring(s, sep + 1, stop);
            int err = k == NULL || v == NULL || PyDict_SetItem(out, k, v) < 0;
            Py_XDECREF(k);
            Py_XDECREF(v);
            if (err)
                goto fail;
        }
        i = stop + 1;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---- index keys and tag codes ------------------------------------------------------ */

/* Java String.hashCode over the UTF-16 code units of valid UTF-8 (from CPython's encoder). */
static int32_t java_hash_utf8(const unsigned char *s, Py_ssize_t n)
{
    uint32_t h = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        uint32_t c = s[i];
        if (c < 0x80) {
            i += 1;
        } else if (c < 0xE0) {
            c = (c & 0x1F) << 6 | (s[i + 1] & 0x3F);
            i += 2;
        } else if (c < 0xF0) {
            c = (c & 0x0F) << 12 | (s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
            i += 3;
        } else {
            c = (c & 0x07) << 18 | (s[i + 1] & 0x3F) << 12 | (s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F);
            i += 4;
        }
        if (c >= 0x10000) {
            c -= 0x10000;
            h = 31 * h + (0xD800 + (c >> 10));
            c = 0xDC00 + (c & 0x3FF);
        }
        h = 31 * h + c;
    }
    return (int32_t)h;
}

/* java_hash(s): NotImplemented for a lone surrogate (the reference's UTF-16 encode refuses it). */
static PyObject *java_hash(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    if (nargs != 1 || !PyUnicode_CheckExact(a[0]))
        NOT_IMPLEMENTED;
    PyObject *s = a[0];
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0) {
        PyErr_Clear();
        NOT_IMPLEMENTED;
    }
#endif
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    uint32_t h = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0xD800 && c <= 0xDFFF)
            NOT_IMPLEMENTED;
        if (c >= 0x10000) {
            c -= 0x10000;
            h = 31 * h + (0xD800 + (c >> 10));
            c = 0xDC00 + (c & 0x3FF);
        }
        h = 31 * h + c;
    }
    return PyLong_FromLong((int32_t)h);
}

/* The value of property `name` (given as "\x02NAME\x01") in props as record.index_fields
   finds it: the first match in "\x02" + props + "\x02", up to the next "\x02". */
static int find_prop(const char *p, Py_ssize_t n, const char *pat, Py_ssize_t plen,
                     const char **val, Py_ssize_t *vlen)
{
    const char *at = NULL;
    if (n >= plen - 1 && memcmp(p, pat + 1, plen - 1) == 0) {
        at = p + plen - 1;
    } else if (n >= plen) {
        const char *q = p, *last = p + n - plen;  /* memmem is not portable */
        while (q <= last && (q = memchr(q, '\x02', last - q + 1)) != NULL) {
            if (memcmp(q + 1, pat + 1, plen - 1) == 0) {
                at = q + plen;
                break;
            }
            q++;
        }
    }
    if (at == NULL)
        return 0;
    const char *stop = memchr(at, '\x02', p + n - at);
    *val = at;
    *vlen = (stop != NULL ? stop : p + n) - at;
    return 1;
}

static int add_key(PyObject *keyed, const char *k, Py_ssize_t n, uint32_t prefix, PyObject *phys)
{
    uint32_t h = crc32_update(prefix, (const unsigned char *)k, n) & HASH_MASK;
    PyObject *t = Py_BuildValue("(kO)", (unsigned long)h, phys);
    if (t == NULL)
        return -1;
    int err = PyList_Append(keyed, t);
    Py_DECREF(t);
    return err;
}

/* index_run(phys_offsets, props, prefix, want_tags, to_index) -> (tag codes, [(key hash, phys)]):
   the per-record loop of the broker's dispatch (store.index_run). */
static PyObject *index_run(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    static const char TAGS[] = "\x02TAGS\x01", UNIQ[] = "\x02UNIQ_KEY\x01", KEYS[] = "\x02KEYS\x01";
    long long prefix;
    if (nargs != 5 || !is_seq(a[0], -1) || !as_int(a[2], 0, 0xFFFFFFFFLL, &prefix)
            || !PyBool_Check(a[3]) || !PyBool_Check(a[4]))
        NOT_IMPLEMENTED;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(a[0]);
    if (!is_seq(a[1], n))
        NOT_IMPLEMENTED;
    int want_tags = a[3] == Py_True, to_index = a[4] == Py_True;
    PyObject *codes = PyList_New(want_tags ? n : 0), *keyed = PyList_New(0);
    if (codes == NULL || keyed == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(a[1], i), *phys = PySequence_Fast_GET_ITEM(a[0], i);
        Py_ssize_t len, vlen;
        const char *p, *val;
        if (!PyUnicode_CheckExact(s))
            goto not_mine;
        if ((p = PyUnicode_AsUTF8AndSize(s, &len)) == NULL) {  /* a lone surrogate */
            PyErr_Clear();
            goto not_mine;
        }
        if (want_tags) {
            int32_t code = find_prop(p, len, TAGS, sizeof TAGS - 1, &val, &vlen)
                           ? java_hash_utf8((const unsigned char *)val, vlen) : 0;
            PyObject *c = PyLong_FromLong(code);
            if (c == NULL)
                goto fail;
            PyList_SET_ITEM(codes, i, c);
        }
        if (!to_index)
            continue;
        if (find_prop(p, len, UNIQ, sizeof UNIQ - 1, &val, &vlen)
                && add_key(keyed, val, vlen, (uint32_t)prefix, phys) < 0)
            goto fail;
        if (find_prop(p, len, KEYS, sizeof KEYS - 1, &val, &vlen)) {
            const char *k = val, *stop = val + vlen;
            while (k < stop) {  /* split on " ", empty keys dropped */
                const char *sp = memchr(k, ' ', stop - k);
                const char *kend = sp != NULL ? sp : stop;
                if (kend > k && add_key(keyed, k, kend - k, (uint32_t)prefix, phys) < 0)
                    goto fail;
                k = kend + 1;
            }
        }
    }
    PyObject *out = PyTuple_Pack(2, codes, keyed);
    Py_DECREF(codes);
    Py_DECREF(keyed);
    return out;
not_mine:
    Py_DECREF(codes);
    Py_DECREF(keyed);
    NOT_IMPLEMENTED;
fail:
    Py_XDECREF(codes);
    Py_XDECREF(keyed);
    return NULL;
}

/* pack_entries(phys_offsets, sizes, codes) -> ConsumeQueue entries (">qiq" each) */
static PyObject *pack_entries(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    if (!cq_ready || nargs != 3 || !is_seq(a[0], -1))
        NOT_IMPLEMENTED;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(a[0]);
    if (!is_seq(a[1], n) || !is_seq(a[2], n) || n > PY_SSIZE_T_MAX / CQ_ENTRY)
        NOT_IMPLEMENTED;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * CQ_ENTRY);
    if (out == NULL)
        return NULL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++, w += CQ_ENTRY) {
        long long phys, size, code;
        if (!I64(PySequence_Fast_GET_ITEM(a[0], i), &phys) || !I32(PySequence_Fast_GET_ITEM(a[1], i), &size)
                || !I64(PySequence_Fast_GET_ITEM(a[2], i), &code)) {
            Py_DECREF(out);
            NOT_IMPLEMENTED;
        }
        put64(w + CQ_AT_PHYS, (uint64_t)phys);
        put32(w + CQ_AT_SIZE, (uint32_t)size);
        put64(w + CQ_AT_CODE, (uint64_t)code);
    }
    return out;
}

/* put_entries(mm, items, n, slots, entries_at, diff) -> (n, newly used slots): IndexFile
   entries for (key hash, phys) items, chained through the slots. Every position is
   checked before the first store, so a NotImplemented leaves the mapping untouched. */
static PyObject *put_entries(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    long long n, slots, entries_at, diff;
    if (!index_ready || nargs != 6 || !is_seq(a[1], -1) || !I32(a[2], &n) || !I64(a[3], &slots) || !I64(a[4], &entries_at)
            || !I32(a[5], &diff) || slots <= 0)
        NOT_IMPLEMENTED;
    Py_buffer v;
    if (PyObject_GetBuffer(a[0], &v, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        NOT_IMPLEMENTED;
    }
    PyObject *items = a[1];
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    long long *todo = PyMem_Malloc((2 * (size_t)count + 1) * sizeof(long long));
    int ok = todo != NULL && n >= 0 && n + count <= INT32_MAX && slots <= v.len && entries_at >= 0
             && entries_at <= v.len;
    for (Py_ssize_t i = 0; ok && i < count; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(items, i);
        ok = PyTuple_CheckExact(t) && PyTuple_GET_SIZE(t) == 2 && I32(PyTuple_GET_ITEM(t, 0), &todo[2 * i])
             && I64(PyTuple_GET_ITEM(t, 1), &todo[2 * i + 1]);
        if (ok) {
            long long h = todo[2 * i], slot = h % slots;
            if (slot < 0)
                slot += slots;  /* Python's modulo */
            long long slot_pos = INDEX_HEADER + slot * 4;
            long long entry_pos = entries_at + (n + i) * INDEX_ENTRY;
            ok = slot_pos + 4 <= v.len && entry_pos + INDEX_ENTRY <= v.len;
        }
    }
    long long used = 0;
    if (ok) {
        unsigned char *m = v.buf;
        for (Py_ssize_t i = 0; i < count; i++, n++) {
            long long h = todo[2 * i], slot = h % slots;
            if (slot < 0)
                slot += slots;
            unsigned char *sp = m + INDEX_HEADER + slot * 4;
            int32_t prev = get_i32(sp);
            if (prev <= 0 || prev >= n) {
                prev = 0;
                used++;
            }
            unsigned char *e = m + entries_at + n * INDEX_ENTRY;
            put32(e + IX_AT_HASH, (uint32_t)h);
            put64(e + IX_AT_PHYS, (uint64_t)todo[2 * i + 1]);
            put32(e + IX_AT_DIFF, (uint32_t)diff);
            put32(e + IX_AT_PREV, (uint32_t)prev);
            put32(sp, (uint32_t)n);
        }
    }
    PyMem_Free(todo);
    PyBuffer_Release(&v);
    if (!ok)
        NOT_IMPLEMENTED;
    return Py_BuildValue("(LL)", n, used);
}

/* ---- Either: what quiver.wire.speedups.fast returns ----------------------------------------
   Calls the twin, and the reference when the twin returns NotImplemented or keywords are
   given: the choice made in C, without a Python frame per call. Its attributes (the
   reference's name and doc, `reference`) live in its __dict__; it binds as a function does. */

typedef struct {
    PyObject_HEAD
    PyObject *twin, *reference, *dict;
    vectorcallfunc vectorcall;
} Either;

static PyObject *either_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Either *e = (Either *)self;
    if (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0) {
        PyObject *out = PyObject_Vectorcall(e->twin, args, nargsf, NULL);
        if (out != Py_NotImplemented)
            return out;  /* an answer, or the twin's own error (NULL) */
        Py_DECREF(out);
    }
    return PyObject_Vectorcall(e->reference, args, nargsf, kwnames);
}

static PyObject *either_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *twin, *reference;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "Either takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "Either", 2, 2, &twin, &reference))
        return NULL;
    if (!PyCallable_Check(twin) || !PyCallable_Check(reference)) {
        PyErr_SetString(PyExc_TypeError, "Either(twin, reference) takes two callables");
        return NULL;
    }
    Either *e = (Either *)type->tp_alloc(type, 0);
    if (e == NULL)
        return NULL;
    e->twin = Py_NewRef(twin);
    e->reference = Py_NewRef(reference);
    e->vectorcall = either_vectorcall;
    return (PyObject *)e;
}

static int either_traverse(Either *e, visitproc visit, void *arg)
{
    Py_VISIT(e->twin);
    Py_VISIT(e->reference);
    Py_VISIT(e->dict);
    return 0;
}

static int either_clear(Either *e)
{
    Py_CLEAR(e->twin);
    Py_CLEAR(e->reference);
    Py_CLEAR(e->dict);
    return 0;
}

static void either_dealloc(Either *e)
{
    PyObject_GC_UnTrack(e);
    either_clear(e);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyObject *either_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *either_repr(Either *e)
{
    return PyUnicode_FromFormat("<compiled twin of %R>", e->reference);
}

static PyGetSetDef either_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject either_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "quiver._speedups.Either",
    .tp_basicsize = sizeof(Either),
    .tp_dealloc = (destructor)either_dealloc,
    .tp_repr = (reprfunc)either_repr,
    .tp_vectorcall_offset = offsetof(Either, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A compiled twin, falling back to its Python reference (quiver.wire.speedups.fast).",
    .tp_traverse = (traverseproc)either_traverse,
    .tp_clear = (inquiry)either_clear,
    .tp_descr_get = either_get,
    .tp_getset = either_getset,
    .tp_dictoffset = offsetof(Either, dict),
    .tp_new = either_new,
};

/* ---- put_run: the common put in one call ---------------------------------------------- */

/* os.pwrite until all of buf is written at `at` (0 with an OSError set, as os.pwrite raises it);
   the GIL is released while the kernel copies, as os.pwrite does */
static int pwrite_all(int fd, const char *buf, Py_ssize_t len, long long at)
{
    while (len > 0) {
        ssize_t n;
        int err;
        Py_BEGIN_ALLOW_THREADS
        do {
            n = pwrite(fd, buf, (size_t)len, (off_t)at);
        } while (n < 0 && errno == EINTR);
        err = errno;
        Py_END_ALLOW_THREADS
        if (n < 0) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return 0;
        }
        if (n == 0) {  /* a regular file does not do this: the reference says the same */
            PyErr_SetString(PyExc_OSError, "pwrite wrote nothing");
            return 0;
        }
        buf += n;
        len -= n;
        at += n;
    }
    return 1;
}

/* put_run(head, bodies, flags, pbs, props, body_crcs, prop_crc, prefix, cl_fd, cl_at, cq_fd, cq_at)
   -> (CommitLog bytes written, phys offsets, sizes, index keys): encode_run, index_run and
   pack_entries above, then both writes; any of them declining declines before a write. */
static PyObject *put_run(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    long long cl_fd, cl_at, cq_fd, cq_at;
    if (nargs != 12 || !as_int(a[8], 0, INT32_MAX, &cl_fd) || !as_int(a[9], 0, INT64_MAX, &cl_at)
            || !as_int(a[10], 0, INT32_MAX, &cq_fd) || !as_int(a[11], 0, INT64_MAX, &cq_at))
        NOT_IMPLEMENTED;
    PyObject *enc_args[6] = {a[0], a[1], a[2], a[3], a[5], a[6]};
    PyObject *run = encode_run(self, enc_args, 6), *ix = NULL, *entries = NULL, *out = NULL;
    if (run == NULL || run == Py_NotImplemented)
        return run;
    PyObject *data = PyTuple_GET_ITEM(run, 0), *offsets = PyTuple_GET_ITEM(run, 1), *sizes = PyTuple_GET_ITEM(run, 2);
    PyObject *ix_args[5] = {offsets, a[4], a[7], Py_True, Py_True};
    ix = index_run(self, ix_args, 5);
    if (ix == NULL || ix == Py_NotImplemented) {
        out = ix;
        ix = NULL;
        goto done;
    }
    PyObject *pack_args[3] = {offsets, sizes, PyTuple_GET_ITEM(ix, 0)};
    entries = pack_entries(self, pack_args, 3);
    if (entries == NULL || entries == Py_NotImplemented) {
        out = entries;
        entries = NULL;
        goto done;
    }
    if (pwrite_all((int)cl_fd, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), cl_at)
            && pwrite_all((int)cq_fd, PyBytes_AS_STRING(entries), PyBytes_GET_SIZE(entries), cq_at))
        out = Py_BuildValue("(nOOO)", PyBytes_GET_SIZE(data), offsets, sizes, PyTuple_GET_ITEM(ix, 1));
done:
    Py_DECREF(run);
    Py_XDECREF(ix);
    Py_XDECREF(entries);
    return out;
}

/* pick_entries(raw, tag_hashes, min_phys, picked, total, max_msgs, max_bytes) -> (walked, total, full):
   the pull's walk over ConsumeQueue entries (queue_reads.pick_entries); everything is checked
   before `picked` is touched, so a NotImplemented leaves it as it was. */
static PyObject *pick_entries(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    long long min_phys, total, max_msgs, max_bytes;
    if (!cq_ready || nargs != 7 || !PyBytes_CheckExact(a[0]) || !PyList_CheckExact(a[3])
            || (a[1] != Py_None && !PyAnySet_CheckExact(a[1])) || !I64(a[2], &min_phys)
            || !as_int(a[4], 0, 1LL << 62, &total) || !I64(a[5], &max_msgs) || !I64(a[6], &max_bytes))
        NOT_IMPLEMENTED;
    Py_ssize_t len = PyBytes_GET_SIZE(a[0]);
    if (len % CQ_ENTRY != 0 || len / CQ_ENTRY > (1 << 30))  /* iter_unpack refuses a torn entry */
        NOT_IMPLEMENTED;
    const unsigned char *r = (const unsigned char *)PyBytes_AS_STRING(a[0]);
    PyObject *picked = a[3], *hashes = a[1];
    long long walked = 0;
    int full = 0;
    for (Py_ssize_t at = 0; at < len; at += CQ_ENTRY) {
        long long phys = get_i64(r + at + CQ_AT_PHYS), size = get_i32(r + at + CQ_AT_SIZE);
        if (hashes != Py_None) {
            PyObject *code = PyLong_FromLongLong(get_i64(r + at + CQ_AT_CODE));
            int in = code == NULL ? -1 : PySet_Contains(hashes, code);
            Py_XDECREF(code);
            if (in < 0)
                return NULL;
            if (!in) {
                walked++;
                continue;
            }
        }
        if (size <= 0 || phys < min_phys) {
            walked++;
            continue;
        }
        if (PyList_GET_SIZE(picked) > 0 && total + size > max_bytes) {
            full = 1;
            break;
        }
        PyObject *t = Py_BuildValue("(LL)", phys, size);
        if (t == NULL || PyList_Append(picked, t) < 0) {
            Py_XDECREF(t);
            return NULL;
        }
        Py_DECREF(t);
        total += size;
        walked++;
        if (PyList_GET_SIZE(picked) >= max_msgs) {
            full = 1;
            break;
        }
    }
    return Py_BuildValue("(LLO)", walked, total, full ? Py_True : Py_False);
}

/* run_end(picked, i, seg_end, gap_bytes) -> (j, end, gaps): the records of a pull read with one
   pread (queue_reads.run_end); items that are not (int, int) tuples in range decline. */
static PyObject *run_end(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    long long i, seg_end, gap, start, size;
    const long long big = 1LL << 61;   /* sums and differences below stay in range */
    if (nargs != 4 || !PyList_CheckExact(a[0]) || !as_int(a[1], 0, PY_SSIZE_T_MAX, &i)
            || !as_int(a[2], -big, big, &seg_end) || !as_int(a[3], -big, big, &gap))
        NOT_IMPLEMENTED;
    PyObject *picked = a[0];
    Py_ssize_t n = PyList_GET_SIZE(picked);
#define SPAN(k, p, s) (PyTuple_CheckExact(PyList_GET_ITEM(picked, k)) && PyTuple_GET_SIZE(PyList_GET_ITEM(picked, k)) == 2 \
        && as_int(PyTuple_GET_ITEM(PyList_GET_ITEM(picked, k), 0), -big, big, (p)) \
        && as_int(PyTuple_GET_ITEM(PyList_GET_ITEM(picked, k), 1), -big, big, (s)))
    if (i >= n || !SPAN(i, &start, &size))
        NOT_IMPLEMENTED;
    long long end = start + size;
    Py_ssize_t j = (Py_ssize_t)i + 1;
    int gaps = 0;
    for (; j < n; j++) {
        long long p, s;
        if (!SPAN(j, &p, &s))
            NOT_IMPLEMENTED;
        if (!(p - end >= 0 && p - end <= gap && p + s <= seg_end))
            break;
        gaps |= p != end;
        end = p + s;
    }
#undef SPAN
    return Py_BuildValue("(nLO)", j, end, gaps ? Py_True : Py_False);
}

/* crc32(data, value=0): zlib.crc32, for the tests of the table above */
static PyObject *crc32(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    Py_buffer v;
    long long start = 0;
    if (nargs < 1 || nargs > 2 || (nargs == 2 && !as_int(a[1], 0, 0xFFFFFFFFLL, &start)) || !byte_view(a[0], &v))
        NOT_IMPLEMENTED;
    uint32_t c = crc32_update((uint32_t)start, v.buf, v.len);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(c);
}

/* ---- schema_decode (quiver.wire.schema.schema_decode: Schema._decode) ----------------------
   The plan is the schema's own description (schema.PLAN, one row a field): (key, name, kind, lo,
   hi, check, default, factory, required, good, encoder). Kinds this file checks itself: an exact int within
   [lo, hi], a bool, a send's [flag, properties] pairs (lo: most pairs, hi: longest properties
   string taken without counting its UTF-8 bytes), a name found in the set `good` (the names its
   check passed before); any other is `check(value)`. Whatever a check
   refuses, or an absent required field, is NotImplemented: the reference raises its own error. */

enum { K_CALL, K_INT, K_BOOL, K_METAS, K_NAME, PLAN_KINDS };
#define PLAN_ROW 11
static PyObject *no_args;

/* SendMetas: [[flag, props], ...] -> ([flags], [props]); NULL without an exception: decline */
static PyObject *send_metas(PyObject *v, long long most, long long longest)
{
    if (!PyList_CheckExact(v) || PyList_GET_SIZE(v) <= 0 || PyList_GET_SIZE(v) > most)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(v);
    PyObject *flags = PyList_New(n), *props = PyList_New(n), *out = NULL;
    if (flags == NULL || props == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(v, i);
        long long f;
        if (!PyList_CheckExact(m) || PyList_GET_SIZE(m) < 2 || !PyLong_CheckExact(PyList_GET_ITEM(m, 0))
                || !I32(PyList_GET_ITEM(m, 0), &f) || !PyUnicode_CheckExact(PyList_GET_ITEM(m, 1))
                || PyUnicode_GET_LENGTH(PyList_GET_ITEM(m, 1)) > longest)
            goto done;
        PyList_SET_ITEM(flags, i, Py_NewRef(PyList_GET_ITEM(m, 0)));
        PyList_SET_ITEM(props, i, Py_NewRef(PyList_GET_ITEM(m, 1)));
    }
    out = PyTuple_Pack(2, flags, props);
done:
    Py_XDECREF(flags);
    Py_XDECREF(props);
    PyErr_Clear();
    return out;
}

/* the items of row i of a schema plan, NULL if it is not a row */
static PyObject *const *plan_row(PyObject *plan, Py_ssize_t i)
{
    PyObject *r = PyTuple_GET_ITEM(plan, i);
    return PyTuple_CheckExact(r) && PyTuple_GET_SIZE(r) == PLAN_ROW ? ((PyTupleObject *)r)->ob_item : NULL;
}

/* the checked value of one field (a new reference), or NULL without an exception: decline */
static PyObject *field_value(PyObject *const *row, PyObject *value)
{
    long long kind, lo, hi, v;
    if (!as_int(row[2], 0, PLAN_KINDS - 1, &kind) || !I64(row[3], &lo) || !I64(row[4], &hi))
        return NULL;
    switch (kind) {
    case K_INT:
        return PyLong_CheckExact(value) && I64(value, &v) && v >= lo && v <= hi ? Py_NewRef(value) : NULL;
    case K_BOOL:
        return PyBool_Check(value) ? Py_NewRef(value) : NULL;
    case K_METAS:
        return send_metas(value, lo, hi);
    case K_NAME:  /* else the check, which keeps the name if good */
        if (PyUnicode_CheckExact(value) && PyAnySet_CheckExact(row[9]) && PySet_Contains(row[9], value) == 1)
            return Py_NewRef(value);
        break;
    default:
        break;
    }
    PyObject *out = PyObject_CallOneArg(row[5], value);
    PyErr_Clear();
    return out;
}

/* schema_decode(cls, plan, ext) -> the cls object, built as Schema._decode builds it */
static PyObject *schema_decode(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(a[0]) || !PyTuple_CheckExact(a[1]) || !PyDict_CheckExact(a[2]))
        NOT_IMPLEMENTED;
    PyObject *plan = a[1], *ext = a[2];
    PyObject *obj = PyBaseObject_Type.tp_new((PyTypeObject *)a[0], no_args, NULL);  /* object.__new__(cls) */
    if (obj == NULL)
        goto decline;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(plan); i++) {
        PyObject *const *row = plan_row(plan, i);
        if (row == NULL)
            goto decline;
        PyObject *value = PyDict_GetItemWithError(ext, row[0]), *out;
        if (value != NULL && value != Py_None)
            out = field_value(row, value);
        else if (PyErr_Occurred() || row[8] == Py_True)  /* a required field absent: the reference says so */
            goto decline;
        else
            out = row[7] == Py_True ? PyObject_CallNoArgs(row[6]) : Py_NewRef(row[6]);
        if (out == NULL)
            goto decline;
        int err = PyObject_GenericSetAttr(obj, row[1], out);  /* object.__setattr__: past the frozen one */
        Py_DECREF(out);
        if (err < 0)
            goto decline;
    }
    return obj;
decline:
    PyErr_Clear();
    Py_XDECREF(obj);
    NOT_IMPLEMENTED;
}

/* ---- schema_ext (quiver.wire.schema.schema_ext: Schema.ext) --------------------------------- */

/* SendMetas.encode of (flags, props), two lists: [[flag, props], ...] as zip() pairs them;
   NULL without an exception for any other value (the encoder runs then) */
static PyObject *metas_pairs(PyObject *v)
{
    if (!PyTuple_CheckExact(v) || PyTuple_GET_SIZE(v) != 2 || !PyList_CheckExact(PyTuple_GET_ITEM(v, 0))
            || !PyList_CheckExact(PyTuple_GET_ITEM(v, 1)))
        return NULL;
    PyObject *flags = PyTuple_GET_ITEM(v, 0), *props = PyTuple_GET_ITEM(v, 1);
    Py_ssize_t n = Py_MIN(PyList_GET_SIZE(flags), PyList_GET_SIZE(props));
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *pair = PyList_New(2);
        if (pair == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(pair, 0, Py_NewRef(PyList_GET_ITEM(flags, i)));
        PyList_SET_ITEM(pair, 1, Py_NewRef(PyList_GET_ITEM(props, i)));
        PyList_SET_ITEM(out, i, pair);
    }
    PyErr_Clear();
    return out;
}

/* schema_ext(obj, plan, keep_defaults) -> the wire map, as Schema.ext builds it */
static PyObject *schema_ext(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    int keep;
    if (nargs != 3 || !PyTuple_CheckExact(a[1]) || (keep = PyObject_IsTrue(a[2])) < 0) {
        PyErr_Clear();
        NOT_IMPLEMENTED;
    }
    PyObject *plan = a[1], *out = PyDict_New(), *value = NULL, *enc = NULL;
    if (out == NULL)
        goto decline;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(plan); i++) {
        PyObject *const *row = plan_row(plan, i);
        if (row == NULL)
            goto decline;
        if ((value = PyObject_GetAttr(a[0], row[1])) == NULL)
            goto decline;
        if (value == Py_None) {
            Py_CLEAR(value);
            continue;
        }
        if (row[8] != Py_True && row[7] != Py_True && !keep) {  /* an optional field at its default is left out */
            PyObject *eq = PyObject_RichCompare(value, row[6], Py_EQ);
            int same = eq == NULL ? -1 : PyObject_IsTrue(eq);
            Py_XDECREF(eq);
            if (same < 0)
                goto decline;
            if (same) {
                Py_CLEAR(value);
                continue;
            }
        }
        long long kind;
        if (as_int(row[2], 0, PLAN_KINDS - 1, &kind) && kind == K_METAS)
            enc = metas_pairs(value);
        if (enc == NULL)
            enc = row[10] == Py_None ? Py_NewRef(value) : PyObject_CallOneArg(row[10], value);
        if (enc == NULL || PyDict_SetItem(out, row[0], enc) < 0)
            goto decline;
        Py_CLEAR(enc);
        Py_CLEAR(value);
    }
    return out;
decline:
    PyErr_Clear();
    Py_XDECREF(value);
    Py_XDECREF(enc);
    Py_XDECREF(out);
    NOT_IMPLEMENTED;
}

/* ---- decode (quiver.wire.protocol.decode) ------------------------------------------------ */

/* decode(frames) -> Envelope of a [version, header, body...] message whose frames are bytes;
   anything the reference would refuse (or read through zmq.Frame) declines. */
static PyObject *decode(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    if (!envelope_ready || nargs != 1 || !(PyList_CheckExact(a[0]) || PyTuple_CheckExact(a[0])))
        NOT_IMPLEMENTED;
    PyObject *const *f = PySequence_Fast_ITEMS(a[0]);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(a[0]);
    if (n < 2 || !PyBytes_CheckExact(f[0]) || PyBytes_GET_SIZE(f[0]) != PyBytes_GET_SIZE(env_version)
            || memcmp(PyBytes_AS_STRING(f[0]), PyBytes_AS_STRING(env_version), PyBytes_GET_SIZE(env_version)) != 0
            || !PyBytes_CheckExact(f[1]) || PyBytes_GET_SIZE(f[1]) > ENV_MAX_HEADER)
        NOT_IMPLEMENTED;
    for (Py_ssize_t i = 2; i < n; i++)
        if (!PyBytes_CheckExact(f[i]))
            NOT_IMPLEMENTED;
    PyObject *head = PyObject_CallOneArg(env_loads, f[1]), *item[E_COUNT] = {NULL};
    if (head == NULL || !PyDict_CheckExact(head))
        goto decline;
    PyObject *code = PyDict_GetItemString(head, "c"), *id = PyDict_GetItemString(head, "id");
    PyObject *ext = PyDict_GetItemString(head, "ext"), *remark = PyDict_GetItemString(head, "r");
    if (code == NULL || id == NULL || !PyLong_CheckExact(code) || !PyLong_CheckExact(id)
            || (remark != NULL && remark != Py_None && !PyUnicode_Check(remark)))
        goto decline;
    int full = ext != NULL && PyObject_IsTrue(ext) == 1;  /* `head.get("ext") or {}` */
    if (PyErr_Occurred() || (full && !PyDict_Check(ext)))
        goto decline;
    item[E_CODE] = Py_NewRef(code);
    item[E_ID] = Py_NewRef(id);
    item[E_EXT] = full ? Py_NewRef(ext) : PyDict_New();
    item[E_REMARK] = Py_NewRef(remark != NULL ? remark : Py_None);
    item[E_BODIES] = PyList_New(n - 2);
    Py_DECREF(head);
    for (Py_ssize_t i = 2; item[E_BODIES] != NULL && i < n; i++)
        PyList_SET_ITEM(item[E_BODIES], i - 2, Py_NewRef(f[i]));
    PyObject *obj = envelope_type->tp_alloc(envelope_type, 0);
    int ok = obj != NULL;
    for (int i = 0; i < E_COUNT; i++) {
        ok &= item[i] != NULL;
        if (obj != NULL)
            *(PyObject **)((char *)obj + ENV_AT[i]) = item[i];  /* a NULL slot is skipped when obj is freed */
        else
            Py_XDECREF(item[i]);
    }
    if (!ok)
        Py_CLEAR(obj);
    return obj;
decline:
    PyErr_Clear();
    Py_XDECREF(head);
    NOT_IMPLEMENTED;
}

/* ---- send_results (quiver.client.message.send_results) -----------------------------------
   A send reply's SendResults, one per message of an answered batch: the class's slots filled
   from C instead of a Python __init__ per message. Slots from layout "send_result". */
enum { R_STATUS, R_MSG_ID, R_BROKER, R_QUEUE_ID, R_QOFF, R_TOPIC, R_STORE_HOST, R_PHYS, R_TXN, R_COUNT };
static const char *const result_slots[R_COUNT] = {
    "status", "msg_id", "broker", "queue_id", "queue_offset", "topic", "store_host", "commit_log_offset",
    "transaction_id",
};
static Py_ssize_t RESULT_AT[R_COUNT];
static PyTypeObject *result_type;
static int result_ready;

/* send_results(status, msg_ids, broker, queue_id, first, topic, store_host, phys_offsets) -> [SendResult, ...]:
   queue offsets first, first + 1, ...; as many as the shorter list */
static PyObject *send_results(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    if (!result_ready || nargs != 8 || !PyList_CheckExact(a[1]) || !PyList_CheckExact(a[7]) || !PyLong_CheckExact(a[4]))
        NOT_IMPLEMENTED;
    int overflow = 0;
    long long first = PyLong_AsLongLongAndOverflow(a[4], &overflow);
    Py_ssize_t n = Py_MIN(PyList_GET_SIZE(a[1]), PyList_GET_SIZE(a[7]));
    if (overflow || (first == -1 && PyErr_Occurred()) || first > LLONG_MAX - n || first < LLONG_MIN + n) {
        PyErr_Clear();
        NOT_IMPLEMENTED;
    }
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *obj = result_type->tp_alloc(result_type, 0);
        if (obj == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *item[R_COUNT] = {
            [R_STATUS] = Py_NewRef(a[0]), [R_MSG_ID] = Py_NewRef(PyList_GET_ITEM(a[1], i)),
            [R_BROKER] = Py_NewRef(a[2]), [R_QUEUE_ID] = Py_NewRef(a[3]), [R_QOFF] = PyLong_FromLongLong(first + i),
            [R_TOPIC] = Py_NewRef(a[5]), [R_STORE_HOST] = Py_NewRef(a[6]),
            [R_PHYS] = Py_NewRef(PyList_GET_ITEM(a[7], i)), [R_TXN] = Py_NewRef(Py_None),
        };
        int ok = 1;
        for (int k = 0; k < R_COUNT; k++) {
            ok &= item[k] != NULL;
            *(PyObject **)((char *)obj + RESULT_AT[k]) = item[k];  /* a NULL slot is skipped when obj is freed */
        }
        PyList_SET_ITEM(out, i, obj);
        if (!ok) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

/* ---- layout: the Python owners hand their layouts over ------------------------------------ */

#define COUNT(a) ((Py_ssize_t)(sizeof(a) / sizeof((a)[0])))

/* Match the owner's ((name, offset, size), ...) of a `total`-byte layout to `spec` by name:
   every name known and given once, of the width this file uses (spec size 0: any width),
   within the layout, the widths adding up to it. Sets each *at; 0 with an exception if not. */
static int set_fields(const char *what, field *spec, Py_ssize_t n, Py_ssize_t total, PyObject *fields)
{
    if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) != n) {
        PyErr_Format(PyExc_ValueError, "%s: %zd fields given, the compiled twins know %zd", what,
                     PyTuple_Check(fields) ? PyTuple_GET_SIZE(fields) : (Py_ssize_t)-1, n);
        return 0;
    }
    for (Py_ssize_t k = 0; k < n; k++)
        *spec[k].at = -1;
    Py_ssize_t sum = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name;
        Py_ssize_t at, size, k = 0;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(fields, i), "snn", &name, &at, &size))
            return 0;
        while (k < n && strcmp(spec[k].name, name) != 0)
            k++;
        if (k == n || *spec[k].at != -1) {
            PyErr_Format(PyExc_ValueError, "%s: field %s unknown to the compiled twins, or given twice", what, name);
            return 0;
        }
        if ((spec[k].size && spec[k].size != size) || at < 0 || size < 0 || at > total - size) {
            PyErr_Format(PyExc_ValueError, "%s: field %s of %zd bytes at %zd (of %zd), the compiled twins use %zd",
                         what, name, size, at, total, spec[k].size);
            return 0;
        }
        *spec[k].at = at;
        sum += size;
    }
    if (sum != total) {
        PyErr_Format(PyExc_ValueError, "%s: fields of %zd bytes in all, the layout's size is %zd", what, sum, total);
        return 0;
    }
    return 1;
}

/* The NamedTuple extra[key]: its item positions by name into `spec`, the type into *out. */
static int set_items(const char *what, PyObject *extra, const char *key, field *spec, Py_ssize_t n,
                     PyTypeObject **out)
{
    PyObject *type = PyDict_GetItemString(extra, key), *names = NULL, *items = NULL;
    if (type == NULL || !PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)
            || ((PyTypeObject *)type)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a NamedTuple", what, key);
        return 0;
    }
    if ((names = PyObject_GetAttrString(type, "_fields")) == NULL || !PyTuple_Check(names)) {
        Py_XDECREF(names);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: %s has no _fields", what, key);
        return 0;
    }
    int ok = (items = PyTuple_New(PyTuple_GET_SIZE(names))) != NULL;
    for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(names); i++) {
        PyObject *item = Py_BuildValue("(Onn)", PyTuple_GET_ITEM(names, i), i, (Py_ssize_t)1);
        ok = item != NULL;
        if (ok)
            PyTuple_SET_ITEM(items, i, item);
    }
    ok = ok && set_fields(key, spec, n, n, items);
    if (ok)
        Py_XSETREF(*out, (PyTypeObject *)Py_NewRef(type));
    Py_DECREF(names);
    Py_XDECREF(items);
    return ok;
}

/* extra["type"], a slotted class whose __slots__ are exactly `names` (n of them): where each
   lies into at[], the class into *type. 0 with an exception if it has others. */
static int set_slots(const char *what, PyObject *extra, const char *const *names, int n, Py_ssize_t *at,
                     PyTypeObject **type_out)
{
    PyObject *type = PyDict_GetItemString(extra, "type"), *slots;
    if (type == NULL || !PyType_Check(type) || (slots = PyObject_GetAttrString(type, "__slots__")) == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: type must be a class with __slots__", what);
        return 0;
    }
    int ok = PyTuple_Check(slots) && PyTuple_GET_SIZE(slots) == n;
    for (int i = 0; ok && i < n; i++) {
        PyObject *d = PyDict_GetItemString(((PyTypeObject *)type)->tp_dict, names[i]);
        ok = d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)
             && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX
             && PySequence_Contains(slots, ((PyMemberDescrObject *)d)->d_common.d_name) == 1;
        if (ok)
            at[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    Py_DECREF(slots);
    if (!ok) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: the compiled twins know %d slots by name (%s ...), the class has others",
                     what, n, names[0]);
        return 0;
    }
    Py_XSETREF(*type_out, (PyTypeObject *)Py_NewRef(type));
    return 1;
}

/* layout(name, size, ((field, offset, size), ...), extra): the layout `name` as its owner
   describes it (quiver.wire.speedups.layout). Its twins run from now on; refused (ValueError,
   TypeError), they decline until a layout is accepted. */
static PyObject *layout(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    Py_ssize_t total;
    if (nargs != 4 || !PyUnicode_Check(a[0]) || !PyDict_Check(a[3]) || (total = PyLong_AsSsize_t(a[1])) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "layout(name, size, fields, extra)");
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(a[0]);
    if (name == NULL)
        return NULL;
    if (strcmp(name, "record") == 0) {
        record_ready = 0;
        if (!set_fields(name, record_fields, COUNT(record_fields), total, a[2])
                || !set_items(name, a[3], "run_head", head_items, H_COUNT, &run_head_type)
                || !set_items(name, a[3], "fields", fields_items, F_COUNT, &fields_type))
            return NULL;
        FIXED_SIZE = total;
        MIN_RECORD = total + 1 + 2;  /* a one-byte topic length and PROPLEN */
        record_ready = 1;
    } else if (strcmp(name, "message_ext") == 0) {
        message_ready = 0;
        if (!set_slots(name, a[3], msg_slots, M_COUNT, MSG_AT, &message_type))
            return NULL;
        message_ready = 1;
    } else if (strcmp(name, "send_result") == 0) {
        result_ready = 0;
        if (!set_slots(name, a[3], result_slots, R_COUNT, RESULT_AT, &result_type))
            return NULL;
        result_ready = 1;
    } else if (strcmp(name, "envelope") == 0) {
        envelope_ready = 0;
        PyObject *loads = PyDict_GetItemString(a[3], "loads"), *version = PyDict_GetItemString(a[3], "version");
        PyObject *most = PyDict_GetItemString(a[3], "max_header");
        if (loads == NULL || !PyCallable_Check(loads) || version == NULL || !PyBytes_CheckExact(version)
                || most == NULL || (ENV_MAX_HEADER = PyLong_AsSsize_t(most)) < 0) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "envelope: loads, version (bytes) and max_header expected");
            return NULL;
        }
        if (!set_slots(name, a[3], env_slots, E_COUNT, ENV_AT, &envelope_type))
            return NULL;
        Py_XSETREF(env_loads, Py_NewRef(loads));
        Py_XSETREF(env_version, Py_NewRef(version));
        envelope_ready = 1;
    } else if (strcmp(name, "consume_queue") == 0) {
        cq_ready = 0;
        if (!set_fields(name, cq_fields, COUNT(cq_fields), total, a[2]))
            return NULL;
        CQ_ENTRY = total;
        cq_ready = 1;
    } else if (strcmp(name, "index_file") == 0) {
        index_ready = 0;
        PyObject *header = PyDict_GetItemString(a[3], "header_size"), *slot = PyDict_GetItemString(a[3], "slot_size");
        if (header == NULL || slot == NULL || !PyLong_Check(header) || PyLong_AsSsize_t(slot) != 4) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "index_file: header_size and 4-byte slots (slot_size) expected");
            return NULL;
        }
        if (!set_fields(name, index_fields, COUNT(index_fields), total, a[2]))
            return NULL;
        if ((INDEX_HEADER = PyLong_AsSsize_t(header)) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "index_file: header_size below 0");
            return NULL;
        }
        INDEX_ENTRY = total;
        index_ready = 1;
    } else {
        PyErr_Format(PyExc_ValueError, "no compiled twin reads a layout called %s", name);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- kafka_records: the Kafka gateway's record batch v2 records (services/kafka/records.py) ----
   Kafka's record format, not one of Quiver's: each row (offset, timestamp, key, value, headers)
   as  length varint | attributes 0 | timestamp delta varlong | offset delta varint | key varbytes |
   value varbytes | header count varint | (name varbytes, value varbytes)*, zigzag varints, deltas
   from the first row. The batch header before them is packed by the Python caller. */

static inline uint64_t kz_zigzag(int64_t n) { return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63); }

static inline Py_ssize_t kz_len(uint64_t z)
{
    Py_ssize_t n = 1;
    while (z > 0x7F) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline char *kz_put(char *p, uint64_t z)
{
    while (z > 0x7F) {
        *p++ = (char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (char)z;
    return p;
}

/* a varbytes' size (-1: null) */
static inline Py_ssize_t kz_bytes_len(Py_ssize_t n) { return n < 0 ? 1 : kz_len(kz_zigzag(n)) + n; }

typedef struct {
    int64_t dt, dofs;
    Py_ssize_t size;   /* the record's length, without its own length varint */
} kz_row;

/* A row's parts into *r and its size; 0 when the row is not (int, int, bytes|None, bytes|None,
   list|tuple of (str, bytes|None)) within int64 deltas of the first. */
static int kz_measure(PyObject *row, int64_t base, int64_t base_ts, kz_row *r, int64_t *offset, int64_t *ts)
{
    if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != 5)
        return 0;
    PyObject *o = PyTuple_GET_ITEM(row, 0), *t = PyTuple_GET_ITEM(row, 1), *key = PyTuple_GET_ITEM(row, 2),
             *value = PyTuple_GET_ITEM(row, 3), *headers = PyTuple_GET_ITEM(row, 4);
    int overflow = 0;
    if (!PyLong_Check(o) || !PyLong_Check(t))
        return 0;
    *offset = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (*offset == -1 && PyErr_Occurred()))
        return 0;
    *ts = PyLong_AsLongLongAndOverflow(t, &overflow);
    if (overflow || (*ts == -1 && PyErr_Occurred()))
        return 0;
    if (__builtin_sub_overflow(*ts, base_ts, &r->dt) || __builtin_sub_overflow(*offset, base, &r->dofs))
        return 0;
    if ((key != Py_None && !PyBytes_CheckExact(key)) || (value != Py_None && !PyBytes_CheckExact(value)))
        return 0;
    if (!PyList_CheckExact(headers) && !PyTuple_CheckExact(headers))
        return 0;
    Py_ssize_t nh = PySequence_Fast_GET_SIZE(headers);
    Py_ssize_t size = 1 + kz_len(kz_zigzag(r->dt)) + kz_len(kz_zigzag(r->dofs))
                      + kz_bytes_len(key == Py_None ? -1 : PyBytes_GET_SIZE(key))
                      + kz_bytes_len(value == Py_None ? -1 : PyBytes_GET_SIZE(value)) + kz_len(kz_zigzag(nh));
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *h = PySequence_Fast_GET_ITEM(headers, i);
        Py_ssize_t klen;
        if (!PyTuple_CheckExact(h) || PyTuple_GET_SIZE(h) != 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(h, 0)))
            return 0;
        PyObject *hv = PyTuple_GET_ITEM(h, 1);
        if (hv != Py_None && !PyBytes_CheckExact(hv))
            return 0;
        if (PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(h, 0), &klen) == NULL) {   /* a lone surrogate */
            PyErr_Clear();
            return 0;
        }
        size += kz_bytes_len(klen) + kz_bytes_len(hv == Py_None ? -1 : PyBytes_GET_SIZE(hv));
    }
    r->size = size;
    return 1;
}

static char *kz_put_bytes(char *p, PyObject *b)
{
    if (b == Py_None)
        return kz_put(p, kz_zigzag(-1));
    Py_ssize_t n = PyBytes_GET_SIZE(b);
    p = kz_put(p, kz_zigzag(n));
    memcpy(p, PyBytes_AS_STRING(b), (size_t)n);
    return p + n;
}

/* kafka_records(rows, room, prefix) -> (bytearray, rows used, first offset, first timestamp, last offset,
   max timestamp) */
static PyObject *kafka_records(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(a[0]) || PyList_GET_SIZE(a[0]) == 0 || !PyLong_Check(a[1])
            || !PyLong_Check(a[2]))
        NOT_IMPLEMENTED;
    PyObject *rows = a[0];
    Py_ssize_t n = PyList_GET_SIZE(rows), prefix = PyLong_AsSsize_t(a[2]);
    long long room = PyLong_AsLongLong(a[1]);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        NOT_IMPLEMENTED;
    }
    if (prefix < 0 || prefix > 4096)
        NOT_IMPLEMENTED;
    PyObject *first = PyList_GET_ITEM(rows, 0);
    int64_t base, base_ts, last, max_ts, offset, ts;
    if (!PyTuple_CheckExact(first) || PyTuple_GET_SIZE(first) != 5 || !PyLong_Check(PyTuple_GET_ITEM(first, 0))
            || !PyLong_Check(PyTuple_GET_ITEM(first, 1)))
        NOT_IMPLEMENTED;
    int overflow = 0, overflow2 = 0;
    base = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(first, 0), &overflow);
    base_ts = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(first, 1), &overflow2);
    if (overflow || overflow2 || PyErr_Occurred()) {
        PyErr_Clear();
        NOT_IMPLEMENTED;
    }
    kz_row *r = PyMem_Malloc(sizeof(kz_row) * (size_t)n);
    if (r == NULL)
        return PyErr_NoMemory();
    Py_ssize_t used = 0, total = 0;
    last = base;
    max_ts = base_ts;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!kz_measure(PyList_GET_ITEM(rows, i), base, base_ts, &r[i], &offset, &ts)) {
            PyErr_Clear();
            PyMem_Free(r);
            NOT_IMPLEMENTED;
        }
        Py_ssize_t whole = r[i].size + kz_len(kz_zigzag(r[i].size));
        room -= whole;
        if (room < 0 && used)
            break;
        used++;
        total += whole;
        last = offset;
        if (ts > max_ts)
            max_ts = ts;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, prefix + total);
    if (out == NULL) {
        PyMem_Free(r);
        return NULL;
    }
    char *p = PyByteArray_AS_STRING(out);
    memset(p, 0, (size_t)prefix);
    p += prefix;
    for (Py_ssize_t i = 0; i < used; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i), *headers = PyTuple_GET_ITEM(row, 4);
        Py_ssize_t nh = PySequence_Fast_GET_SIZE(headers);
        p = kz_put(p, kz_zigzag(r[i].size));
        *p++ = 0;
        p = kz_put(p, kz_zigzag(r[i].dt));
        p = kz_put(p, kz_zigzag(r[i].dofs));
        p = kz_put_bytes(p, PyTuple_GET_ITEM(row, 2));
        p = kz_put_bytes(p, PyTuple_GET_ITEM(row, 3));
        p = kz_put(p, kz_zigzag(nh));
        for (Py_ssize_t k = 0; k < nh; k++) {
            PyObject *h = PySequence_Fast_GET_ITEM(headers, k);
            Py_ssize_t klen;
            const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(h, 0), &klen);   /* cached: measured */
            p = kz_put(p, kz_zigzag(klen));
            memcpy(p, name, (size_t)klen);
            p = kz_put_bytes(p + klen, PyTuple_GET_ITEM(h, 1));
        }
    }
    PyMem_Free(r);
    return Py_BuildValue("(NnLLLL)", out, used, (long long)base, (long long)base_ts, (long long)last,
                         (long long)max_ts);
}

/* kafka_pulled(body, offset, room, prefix, skip, keys_name) -> what kafka_records returns: the records of a pull reply from queue offset `offset` as kafka_records lays
   them out, straight from the reply's bytes (records.kafka_pulled: pulled_rows over
   decode_fields). A record's key is its `keys_name` property, its headers the other properties
   not in `skip`; a kafka.ts property of 1-18 digits is its timestamp (what the gateway writes
   for a record whose time differs from its batch's), other kafka.* properties but kafka.key,
   kafka.value and kafka.headers are no headers. Declines a record with one of those three, a
   non-ASCII or repeated property name or value, or a record it cannot walk. The reference reads a kafka.* record's key and headers by KEYS and
   NOT_HEADERS: the gateway's call passes those. */

#define KZ_NAMES 16   /* property names whose `skip` membership is remembered within one call */

typedef struct {
    const unsigned char *at;
    Py_ssize_t len;
    int skip;
} kz_name;

/* 1 when the property name b[0:len] is in `skip` (a set of str), -1 on error */
static int kz_skipped(const unsigned char *b, Py_ssize_t len, PyObject *skip, kz_name *seen, int *nseen)
{
    for (int i = 0; i < *nseen; i++)
        if (seen[i].len == len && memcmp(seen[i].at, b, (size_t)len) == 0)
            return seen[i].skip;
    PyObject *name = PyUnicode_DecodeASCII((const char *)b, len, "strict");
    if (name == NULL)
        return -1;
    int in = PySet_Contains(skip, name);
    Py_DECREF(name);
    if (in >= 0 && *nseen < KZ_NAMES)
        seen[(*nseen)++] = (kz_name){b, len, in};
    return in;
}

/* One record's properties as key and headers: the key's value into *key (NULL: none) and the
   header (name, value) spans into h (at most hmax). -1 to decline, -2 on error, else the header count. */
static int kz_props(const unsigned char *p, Py_ssize_t n, PyObject *skip, const char *keys_name, Py_ssize_t keys_len,
                    kz_name *seen, int *nseen, const unsigned char **key, Py_ssize_t *key_len,
                    const unsigned char **h, Py_ssize_t *hl, int hmax, int64_t *ts)
{
    static const char crc_head[] = "__CRC32#\x01";
    int nh = 0, have_keys = 0;
    *key = NULL;
    *key_len = 0;
    *ts = -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] >= 0x80)
            return -1;
    if (n >= CRC_PROP_BYTES && memcmp(p + n - CRC_PROP_BYTES, crc_head, 9) == 0)
        n -= CRC_PROP_BYTES;   /* the store's own __CRC32# (record.client_properties) */
    Py_ssize_t i = 0;
    while (i < n) {
        const unsigned char *item = p + i, *sep = memchr(item, 2, (size_t)(n - i));
        Py_ssize_t len = sep ? sep - item : n - i;
        i += len + 1;
        if (len == 0)
            continue;
        const unsigned char *ns = memchr(item, 1, (size_t)len);
        Py_ssize_t klen = ns ? ns - item : len;
        const unsigned char *v = ns ? ns + 1 : item + len;
        Py_ssize_t vlen = item + len - v;
        for (int k = 0; k < nh; k++)   /* a repeated name: the dict keeps the first place, the last value */
            if (hl[2 * k] == klen && memcmp(h[2 * k], item, (size_t)klen) == 0)
                return -1;
        if (klen >= 6 && memcmp(item, "kafka.", 6) == 0) {   /* the gateway's own: never a header */
            if ((klen == 9 && memcmp(item, "kafka.key", 9) == 0) || (klen == 11 && memcmp(item, "kafka.value", 11) == 0)
                    || (klen == 13 && memcmp(item, "kafka.headers", 13) == 0))
                return -1;   /* the reference decodes these */
            if (klen != 8 || memcmp(item, "kafka.ts", 8) != 0)
                continue;    /* kafka.seq (an idempotent batch's first record) and the like */
            if (*ts >= 0 || vlen < 1 || vlen > 18)
                return -1;
            int64_t t = 0;
            for (Py_ssize_t d = 0; d < vlen; d++) {
                if (v[d] < '0' || v[d] > '9')
                    return -1;
                t = t * 10 + (v[d] - '0');
            }
            *ts = t;
            continue;
        }
        if (klen == keys_len && memcmp(item, keys_name, (size_t)klen) == 0) {
            if (have_keys++)
                return -1;
            *key = vlen ? v : NULL;
            *key_len = vlen;
        }
        int s = kz_skipped(item, klen, skip, seen, nseen);
        if (s < 0)
            return -2;
        if (s)
            continue;
        if (nh == hmax)
            return -1;
        h[2 * nh] = item;
        hl[2 * nh] = klen;
        h[2 * nh + 1] = v;
        hl[2 * nh + 1] = vlen;
        nh++;
    }
    return nh;
}

#define KZ_HEADERS 32

static PyObject *kafka_pulled(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    Py_buffer v;
    if (!record_ready || nargs != 6 || !PyLong_Check(a[1]) || !PyLong_Check(a[2]) || !PyLong_Check(a[3])
            || !PyAnySet_Check(a[4]) || !PyUnicode_CheckExact(a[5]))
        NOT_IMPLEMENTED;
    long long offset = PyLong_AsLongLong(a[1]), room = PyLong_AsLongLong(a[2]);
    Py_ssize_t prefix = PyLong_AsSsize_t(a[3]), keys_len;
    const char *keys_name = PyUnicode_AsUTF8AndSize(a[5], &keys_len);
    if (PyErr_Occurred() || keys_name == NULL) {
        PyErr_Clear();
        NOT_IMPLEMENTED;
    }
    if (prefix < 0 || prefix > 4096 || !byte_view(a[0], &v))
        NOT_IMPLEMENTED;
    const unsigned char *b = v.buf, *key, *h[2 * KZ_HEADERS];
    Py_ssize_t hl[2 * KZ_HEADERS], key_len, pos = 0, end = v.len, used = 0, total = 0;
    kz_name seen[KZ_NAMES];
    int nseen = 0, pass;
    int64_t base = -1, base_ts = -1, last = -1, max_ts = -1;
    PyObject *out = NULL;
    char *w = NULL;
    for (pass = 0; pass < 2; pass++) {   /* sizes, then the bytes */
        Py_ssize_t n = 0;
        pos = 0;
        while (pos < end && (pass == 0 || n < used)) {
            span s = {0};
            if (!span_at(b, pos, end, &s))
                goto decline;
            if (s.blank) {
                pos = s.end;
                continue;
            }
            const unsigned char *r = b + pos;
            int64_t qoff = get_i64(r + AT_QOFF), ts = get_i64(r + AT_BORN_TS), dt, dofs;
            for (Py_ssize_t k = 0; k < s.tlen; k++)   /* the reference decodes the topic */
                if (b[s.topic_at + k] >= 0x80)
                    goto decline;
            pos = s.end;
            if (qoff < offset)
                continue;
            int64_t own_ts;
            int nh = kz_props(b + s.props_at, s.plen, a[4], keys_name, keys_len, seen, &nseen, &key, &key_len, h, hl,
                              KZ_HEADERS, &own_ts);
            if (nh == -2)
                goto fail;
            if (nh < 0)
                goto decline;
            if (own_ts >= 0)
                ts = own_ts;
            if (n == 0 && pass == 0) {
                base = qoff;
                base_ts = ts;
                last = qoff;
                max_ts = ts;
            }
            if (__builtin_sub_overflow(ts, base_ts, &dt) || __builtin_sub_overflow(qoff, base, &dofs))
                goto decline;
            Py_ssize_t size = 1 + kz_len(kz_zigzag(dt)) + kz_len(kz_zigzag(dofs))
                              + (key ? kz_bytes_len(key_len) : 1) + kz_bytes_len(s.blen) + kz_len(kz_zigzag(nh));
            for (int k = 0; k < nh; k++)
                size += kz_bytes_len(hl[2 * k]) + kz_bytes_len(hl[2 * k + 1]);
            Py_ssize_t whole = size + kz_len(kz_zigzag(size));
            n++;
            if (pass == 0) {
                room -= whole;
                if (room < 0 && used)
                    break;
                used++;
                total += whole;
                last = qoff;
                if (ts > max_ts)
                    max_ts = ts;
                continue;
            }
            w = kz_put(w, kz_zigzag(size));
            *w++ = 0;
            w = kz_put(w, kz_zigzag(dt));
            w = kz_put(w, kz_zigzag(dofs));
            if (key) {
                w = kz_put(w, kz_zigzag(key_len));
                memcpy(w, key, (size_t)key_len);
                w += key_len;
            } else {
                w = kz_put(w, kz_zigzag(-1));
            }
            w = kz_put(w, kz_zigzag(s.blen));
            memcpy(w, b + s.body_at, (size_t)s.blen);
            w += s.blen;
            w = kz_put(w, kz_zigzag(nh));
            for (int k = 0; k < 2 * nh; k++) {
                w = kz_put(w, kz_zigzag(hl[k]));
                memcpy(w, h[k], (size_t)hl[k]);
                w += hl[k];
            }
        }
        if (pass == 0) {
            if ((out = PyByteArray_FromStringAndSize(NULL, prefix + total)) == NULL)
                goto fail;
            w = PyByteArray_AS_STRING(out);
            memset(w, 0, (size_t)prefix);
            w += prefix;
        }
    }
    PyBuffer_Release(&v);
    return Py_BuildValue("(NnLLLL)", out, used, (long long)base, (long long)base_ts, (long long)last,
                         (long long)max_ts);
decline:
    Py_XDECREF(out);
    PyBuffer_Release(&v);
    NOT_IMPLEMENTED;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&v);
    return NULL;
}

static PyMethodDef methods[] = {
    {"layout", (PyCFunction)(void (*)(void))layout, METH_FASTCALL, "quiver.wire.speedups.layout"},
    {"encode_run", (PyCFunction)(void (*)(void))encode_run, METH_FASTCALL, "record.encode_run"},
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL, "quiver.wire.protocol.decode"},
    {"decode_messages", (PyCFunction)(void (*)(void))decode_messages, METH_FASTCALL, "quiver.client.message.decode_messages"},
    {"send_results", (PyCFunction)(void (*)(void))send_results, METH_FASTCALL, "quiver.client.message.send_results"},
    {"decode_fields", (PyCFunction)(void (*)(void))decode_fields, METH_FASTCALL, "record.decode_fields"},
    {"check_run", (PyCFunction)(void (*)(void))check_run, METH_FASTCALL, "record.check_run"},
    {"settled_run", (PyCFunction)(void (*)(void))settled_run, METH_FASTCALL, "record.settled_run"},
    {"parse_properties", (PyCFunction)(void (*)(void))parse_properties, METH_FASTCALL, "record.parse_properties"},
    {"java_hash", (PyCFunction)(void (*)(void))java_hash, METH_FASTCALL, "message.java_hash"},
    {"index_run", (PyCFunction)(void (*)(void))index_run, METH_FASTCALL, "the broker's store.index_run"},
    {"pack_entries", (PyCFunction)(void (*)(void))pack_entries, METH_FASTCALL, "the broker's consume_queue.pack_entries"},
    {"put_entries", (PyCFunction)(void (*)(void))put_entries, METH_FASTCALL, "the broker's index_file.put_entries"},
    {"pick_entries", (PyCFunction)(void (*)(void))pick_entries, METH_FASTCALL, "the broker's queue_reads.pick_entries"},
    {"run_end", (PyCFunction)(void (*)(void))run_end, METH_FASTCALL, "the broker's queue_reads.run_end"},
    {"put_run", (PyCFunction)(void (*)(void))put_run, METH_FASTCALL, "the broker's appending.put_run"},
    {"kafka_records", (PyCFunction)(void (*)(void))kafka_records, METH_FASTCALL, "the Kafka gateway's records.kafka_records"},
    {"kafka_pulled", (PyCFunction)(void (*)(void))kafka_pulled, METH_FASTCALL, "the Kafka gateway's mapping.kafka_pulled"},
    {"schema_ext", (PyCFunction)(void (*)(void))schema_ext, METH_FASTCALL, "quiver.wire.schema.schema_ext"},
    {"schema_decode", (PyCFunction)(void (*)(void))schema_decode, METH_FASTCALL, "quiver.wire.schema.schema_decode"},
    {"crc32", (PyCFunction)(void (*)(void))crc32, METH_FASTCALL, "zlib.crc32"},
    {"record_columns", (PyCFunction)(void (*)(void))record_columns, METH_FASTCALL, "quiver.spark.columns.record_columns"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "quiver._speedups",
    "Compiled twins of Quiver's per-message functions (see quiver.wire.speedups).", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    crc_init();
    if (no_args == NULL && (no_args = PyTuple_New(0)) == NULL)
        return NULL;
    if (PyType_Ready(&either_type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Either", (PyObject *)&either_type) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "TX_MASK", TX_MASK) < 0
            || PyModule_AddIntConstant(m, "TX_NOT", TX_NOT) < 0
            || PyModule_AddIntConstant(m, "TX_COMMIT", TX_COMMIT) < 0
            || PyModule_AddIntConstant(m, "CRC_PROP_BYTES", CRC_PROP_BYTES) < 0
            || PyModule_AddIntConstant(m, "SYSFLAG_PROP_CRC", SYSFLAG_PROP_CRC) < 0
            || PyModule_AddObject(m, "MAGICS", Py_BuildValue("(kkk)", (unsigned long)MAGIC_V1,
                                                            (unsigned long)MAGIC_V2, (unsigned long)MAGIC_BLANK)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
