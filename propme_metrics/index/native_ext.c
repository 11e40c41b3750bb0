/* Suffix-array search of a batch of query rows in every shard of an index, in one call.
 *
 * Each shard's search runs in three stages per row: the rank block of the row's first token (from
 * `unigram.N`, in memory), a binary search of the in-memory top-level samples (`toplevel.py`), then
 * a binary search of the memory-mapped suffix array in the (at most `stride`) ranks left. The last
 * stage runs all rows of the batch in lockstep: each step first asks for the memory every row will
 * read (a CPU prefetch when the pages are resident; madvise(MADV_WILLNEED), which queues the disk
 * reads of all rows at once, when the shard's last steps had to read the disk), then compares. So a
 * cold search waits for one round of parallel reads per step, not for one page fault after another.
 * Shards are searched by a few threads (never one per row), with the GIL released.
 *
 * Order, bounds and common-prefix lengths are those of infini-gram's engine: suffixes compare by the
 * bytes of their little-endian token ids, a suffix that ends (shard end) sorts before any longer one.
 * Pointers of 1 to 8 bytes are read in place (5-byte pointers: shards above 4 GiB of tokens).
 * Each row's two final neighbours are compared with the query again from its first token: when
 * either comparison disagrees with the search, the suffix array is out of order there, and the call
 * reports the shard and rank instead of an answer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define LEFT 0
#define RIGHT 1
#define UNDETERMINED 2
#define MAX_THREADS 64
#define FANOUT 4                     /* parts a step splits a row's range into when reading the disk */
#define PROBE_ROWS 8                 /* rows whose pages tell whether a shard is in memory */
#define SA_RANGE_BYTES (16 * 4096)   /* a row's remaining pointers requested at once up to this size */

typedef struct {
    PyObject_HEAD
    Py_buffer ds, sa, bkeys, bstarts, bends, skeys, slens;
    int have_blocks, have_samples;
    int64_t n;          /* tokens (suffixes) */
    int width;          /* bytes per token: 2 or 4 */
    int ptr_size;       /* bytes per suffix-array pointer: 1 to 8 */
    int64_t stride;     /* ranks between two samples */
    int64_t nsamples;
    int stokens;        /* tokens per sample */
    int skey_size;      /* bytes per sample key: 2 or 4 */
    int faulted;        /* whether the last disk step of the last call read from the disk */
} Shard;

static long page_size;

static inline uint32_t key_at(const Shard *s, int64_t pos) {
    const uint8_t *p = (const uint8_t *)s->ds.buf + pos * s->width;
    /* little-endian token bytes read big-endian: a key that sorts like the bytes */
    if (s->width == 2) return ((uint32_t)p[0] << 8) | p[1];
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline int64_t pointer_at(const Shard *s, int64_t rank) {
    const uint8_t *p = (const uint8_t *)s->sa.buf + rank * s->ptr_size;
    uint64_t v = 0;
    for (int i = s->ptr_size - 1; i >= 0; i--) v = (v << 8) | p[i];
    return (int64_t)(v / (uint64_t)s->width);
}

/* Compare the suffix at token position `pos` with query q[0..qlen) from token `skip` on: returns
 * LEFT or RIGHT of the bound (lower: suffix >= query is right; upper: suffix > query and not
 * starting with it is right) and sets *lcp. */
static inline int compare(const Shard *s, int64_t pos, const uint32_t *q, int64_t qlen, int64_t skip,
                          int upper, int64_t *lcp) {
    int64_t j = skip, avail = s->n - pos;
    while (j < qlen && j < avail) {
        uint32_t a = key_at(s, pos + j);
        if (a != q[j]) {
            *lcp = j;
            return a > q[j] ? RIGHT : LEFT;
        }
        j++;
    }
    *lcp = j;
    if (j == qlen) return upper ? LEFT : RIGHT;  /* the suffix starts with the whole query */
    return LEFT;                                 /* the suffix ends first: a proper prefix of the query */
}

/* The same against sample i (its first `stokens` tokens only): UNDETERMINED when the query is
 * longer and agrees with all of them. */
static inline int compare_sample(const Shard *s, int64_t i, const uint32_t *q, int64_t qlen, int upper,
                                 int64_t *lcp) {
    int t = s->stokens;
    int len = ((const uint8_t *)s->slens.buf)[i];
    const uint8_t *row = (const uint8_t *)s->skeys.buf + i * t * s->skey_size;
    int64_t j = 0;
    while (j < qlen && j < len) {
        uint32_t a;
        if (s->skey_size == 2) a = ((const uint16_t *)row)[j];
        else a = ((const uint32_t *)row)[j];
        if (a != q[j]) {
            *lcp = j;
            return a > q[j] ? RIGHT : LEFT;
        }
        j++;
    }
    *lcp = j;
    if (j == qlen) return upper ? LEFT : RIGHT;
    if (len < t) return LEFT;  /* the shard ends inside the sample */
    return UNDETERMINED;
}

typedef struct {
    const uint32_t *keys;       /* query keys */
    const int64_t *qstart, *qend;
    const uint8_t *upper;
    int64_t rows;
} Query;

typedef struct {
    int64_t lo, hi, llo, lhi;
    int64_t floor;    /* tokens every suffix strictly between lo and hi shares with the query */
    int sa_ready;     /* whether the pointers of the row's range have been requested from the disk */
} Row;

/* tokens of the query a comparison may skip: all suffixes between the bounds share them */
static inline int64_t skip_of(const Row *w) {
    int64_t skip = w->llo < w->lhi ? w->llo : w->lhi;
    return skip < w->floor ? w->floor : skip;
}

static int major_faults_now(long *out) {
    struct rusage ru;
#ifdef RUSAGE_THREAD
    if (getrusage(RUSAGE_THREAD, &ru) != 0) return -1;
#else
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
#endif
    *out = ru.ru_majflt;
    return 0;
}

/* whether the page holding `addr` is in memory */
static inline int resident(const void *addr) {
    unsigned char vec = 0;
    void *page = (void *)((uintptr_t)addr & ~(uintptr_t)(page_size - 1));
    if (mincore(page, (size_t)page_size, &vec) != 0) return 1;  /* cannot tell: take it as resident */
    return vec & 1;
}

static inline void willneed(const void *base, size_t bytes, const void *addr, size_t len) {
    uintptr_t b = (uintptr_t)base, a = (uintptr_t)addr & ~(uintptr_t)(page_size - 1);
    uintptr_t end = (uintptr_t)addr + len;
    if (a < (b & ~(uintptr_t)(page_size - 1))) a = b & ~(uintptr_t)(page_size - 1);
    if (end > b + bytes) end = b + bytes;
    if (end > a) madvise((void *)a, end - a, MADV_WILLNEED);
}

/* One shard: the rows' bounds into out_hi (the bound's rank) and out_llo/out_lhi (common prefixes
 * with the suffixes at hi - 1 and hi, 0 past either end); returns -1, or the rank where the suffix
 * array was found out of order. st and active: scratch of one entry per row, mids and pos_of of
 * FANOUT - 1 per row. */
static int64_t search_shard(Shard *s, const Query *qr, int check, int force, Row *st, int64_t *active, int64_t *mids,
                            int64_t *pos_of, int64_t *out_hi, int64_t *out_llo, int64_t *out_lhi) {
    int64_t m = qr->rows, na = 0;
    const int64_t *bkeys = s->bkeys.buf, *bstarts = s->bstarts.buf, *bends = s->bends.buf;
    int64_t nblocks = s->have_blocks ? s->bkeys.len / 8 : 0;
    for (int64_t r = 0; r < m; r++) {
        Row *w = &st[r];
        const uint32_t *q = qr->keys + qr->qstart[r];
        int64_t qlen = qr->qend[r] - qr->qstart[r];
        int up = qr->upper[r];
        w->lo = -1; w->hi = s->n; w->llo = w->lhi = 0; w->floor = 0; w->sa_ready = 0;
        if (s->n == 0) { w->hi = 0; continue; }
        if (nblocks) {  /* the rank block of the first token */
            int64_t a = 0, b = nblocks;
            int64_t k = q[0];
            while (a < b) { int64_t c = a + (b - a) / 2; if (bkeys[c] < k) a = c + 1; else b = c; }
            if (a < nblocks && bkeys[a] == k) {
                w->lo = bstarts[a] - 1; w->hi = bends[a]; w->floor = 1;
                if (qlen == 1) {  /* the whole query is the first token: the block is the answer */
                    if (up) { w->lo = bends[a] - 1; w->llo = 1; w->hi = bends[a]; w->lhi = 0; }
                    else { w->hi = bstarts[a]; w->lhi = 1; }
                }
            } else {
                w->hi = a < nblocks ? bstarts[a] : s->n;
                w->lo = w->hi - 1;
            }
        }
        if (s->have_samples && w->hi - w->lo > 1) {
            int64_t i0 = (w->lo + s->stride) / s->stride, i1 = (w->hi - 1) / s->stride + 1;  /* [i0, i1) */
            if (i1 > s->nsamples) i1 = s->nsamples;
            if (i0 < i1) {
                int64_t a = i0, b = i1, lcp;
                while (a < b) {  /* first sample not left of the bound */
                    int64_t c = a + (b - a) / 2;
                    if (compare_sample(s, c, q, qlen, up, &lcp) == LEFT) a = c + 1; else b = c;
                }
                int64_t first_not_left = a;
                b = i1;
                while (a < b) {  /* first sample right of it */
                    int64_t c = a + (b - a) / 2;
                    if (compare_sample(s, c, q, qlen, up, &lcp) != RIGHT) a = c + 1; else b = c;
                }
                if (first_not_left > i0) {
                    compare_sample(s, first_not_left - 1, q, qlen, up, &lcp);
                    w->lo = (first_not_left - 1) * s->stride; w->llo = lcp;
                }
                if (a < i1) {
                    compare_sample(s, a, q, qlen, up, &lcp);
                    w->hi = a * s->stride; w->lhi = lcp;
                }
            }
        }
        if (w->hi - w->lo > 1) active[na++] = r;
    }
    /* the disk stage, every row one step at a time: a binary search in memory; from the disk, each
     * step probes up to FANOUT - 1 ranks per row (half the rounds of reads, for more reads in each) */
    int disk = s->faulted, probe = s->faulted;
    if (force >= 0) { disk = force; probe = 0; }  /* the disk route or the memory route, as asked */
    const uint8_t *sa = s->sa.buf, *ds = s->ds.buf;
    while (na) {
        long before = 0, after = 0;
        if (probe) {  /* the shard read the disk last time: are these pages back in memory? */
            disk = 0;
            for (int64_t i = 0; i < na && i < PROBE_ROWS && !disk; i++) {
                Row *w = &st[active[i]];
                int64_t mid = w->lo + (w->hi - w->lo) / 2;
                disk = !resident(sa + mid * s->ptr_size);
                if (!disk) disk = !resident(ds + (pointer_at(s, mid) + skip_of(w)) * s->width);
            }
            s->faulted = disk;
            probe = 0;
        }
        int fan = disk ? FANOUT : 2;
        for (int64_t i = 0; i < na; i++) {  /* the ranks each row probes, and the pointers there */
            Row *w = &st[active[i]];
            int64_t width = w->hi - w->lo, k = width - 1 < fan - 1 ? width - 1 : fan - 1;
            for (int64_t j = 0; j < k; j++) {
                int64_t rank = w->lo + (j + 1) * width / (k + 1);
                mids[i * (FANOUT - 1) + j] = rank;
                if (!disk) __builtin_prefetch(sa + rank * s->ptr_size);
                else if (w->sa_ready) continue;
                else if (width * s->ptr_size <= SA_RANGE_BYTES) {  /* every pointer the row will read, at once */
                    willneed(sa, s->sa.len, sa + (w->lo + 1) * s->ptr_size, (width - 1) * s->ptr_size);
                    w->sa_ready = 1;
                } else {
                    willneed(sa, s->sa.len, sa + rank * s->ptr_size, s->ptr_size);
                }
            }
        }
        int counted = force < 0 && !disk && major_faults_now(&before) == 0;
        for (int64_t i = 0; i < na; i++) {  /* the tokens each comparison starts at */
            Row *w = &st[active[i]];
            int64_t width = w->hi - w->lo, k = width - 1 < fan - 1 ? width - 1 : fan - 1, skip = skip_of(w);
            for (int64_t j = 0; j < k; j++) {
                int64_t pos = pointer_at(s, mids[i * (FANOUT - 1) + j]);
                const uint8_t *at = ds + (pos + skip) * s->width;
                pos_of[i * (FANOUT - 1) + j] = pos;
                if (disk) willneed(ds, s->ds.len, at, 16 * s->width);
                else __builtin_prefetch(at);
            }
        }
        int64_t keep = 0;
        for (int64_t i = 0; i < na; i++) {
            int64_t r = active[i], lcp = 0;
            Row *w = &st[r];
            int64_t width = w->hi - w->lo, k = width - 1 < fan - 1 ? width - 1 : fan - 1, skip = skip_of(w);
            const uint32_t *q = qr->keys + qr->qstart[r];
            int64_t qlen = qr->qend[r] - qr->qstart[r];
            for (int64_t j = 0; j < k; j++) {  /* ranks grow with j: the first one right of the bound is hi */
                int64_t rank = mids[i * (FANOUT - 1) + j];
                if (compare(s, pos_of[i * (FANOUT - 1) + j], q, qlen, skip, qr->upper[r], &lcp) == RIGHT) {
                    w->hi = rank; w->lhi = lcp;
                    break;
                }
                w->lo = rank; w->llo = lcp;
            }
            if (w->hi - w->lo > 1) active[keep++] = r;
        }
        if (counted && major_faults_now(&after) == 0 && after > before) disk = s->faulted = 1;
        na = keep;
    }
    /* the check: both neighbours of every row compared again from the first token (their pages
     * requested together first when the shard reads the disk) */
    if (disk && check) {
        for (int64_t r = 0; r < m; r++) {
            if (st[r].lo >= 0) willneed(sa, s->sa.len, sa + st[r].lo * s->ptr_size, 2 * s->ptr_size);
        }
        for (int64_t r = 0; r < m; r++) {
            Row *w = &st[r];
            if (w->lo >= 0) willneed(ds, s->ds.len, ds + pointer_at(s, w->lo) * s->width, 16 * s->width);
            if (w->hi < s->n) willneed(ds, s->ds.len, ds + pointer_at(s, w->hi) * s->width, 16 * s->width);
        }
    }
    for (int64_t r = 0; r < m; r++) {
        Row *w = &st[r];
        const uint32_t *q = qr->keys + qr->qstart[r];
        int64_t qlen = qr->qend[r] - qr->qstart[r], lcp;
        int up = qr->upper[r];
        if (check && w->lo >= 0) {
            if (compare(s, pointer_at(s, w->lo), q, qlen, 0, up, &lcp) != LEFT || lcp != w->llo) return w->lo;
        }
        if (check && w->hi < s->n) {
            if (compare(s, pointer_at(s, w->hi), q, qlen, 0, up, &lcp) != RIGHT || lcp != w->lhi) return w->hi;
        }
        out_hi[r] = w->hi; out_llo[r] = w->llo; out_lhi[r] = w->lhi;
    }
    return -1;
}

typedef struct {
    Shard **shards;
    int64_t nshards;
    const Query *q;
    int check, force;
    int64_t *out_hi, *out_llo, *out_lhi, *bad_rank;
    int64_t next;           /* the next shard to take */
    pthread_mutex_t lock;
    int failed_alloc;
} Job;

static void *worker(void *arg) {
    Job *job = arg;
    int64_t m = job->q->rows;
    Row *st = malloc(sizeof(Row) * (m ? m : 1));
    int64_t *active = malloc(sizeof(int64_t) * (m ? m : 1));
    int64_t *mids = malloc(sizeof(int64_t) * (FANOUT - 1) * (m ? m : 1));
    int64_t *pos_of = malloc(sizeof(int64_t) * (FANOUT - 1) * (m ? m : 1));
    if (!st || !active || !mids || !pos_of) {
        pthread_mutex_lock(&job->lock);
        job->failed_alloc = 1;
        pthread_mutex_unlock(&job->lock);
        free(st); free(active); free(mids); free(pos_of);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&job->lock);
        int64_t i = job->next++;
        pthread_mutex_unlock(&job->lock);
        if (i >= job->nshards) break;
        job->bad_rank[i] = search_shard(job->shards[i], job->q, job->check, job->force, st, active, mids, pos_of, job->out_hi + i * m,
                                        job->out_llo + i * m, job->out_lhi + i * m);
    }
    free(st); free(active); free(mids); free(pos_of);
    return NULL;
}

static int writable(PyObject *obj, Py_buffer *view, Py_ssize_t bytes, const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) return -1;
    if (view->len != bytes) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zd bytes", name, bytes);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static int readable(PyObject *obj, Py_buffer *view, Py_ssize_t bytes, const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) != 0) return -1;
    if (bytes >= 0 && view->len != bytes) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zd bytes", name, bytes);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyTypeObject ShardType;

/* search(shards, keys, qstart, qend, upper, out_hi, out_llo, out_lhi, threads, check, force) -> list
 * of the rank found out of order per shard (-1: none; `check` false skips the neighbours' check;
 * force: -1 chooses the memory or the disk route per shard, 0 takes the memory one, 1 the disk one). keys: uint32 query keys; qstart/qend: int64; upper:
 * uint8; outputs: int64 of shards x rows. */
static PyObject *search(PyObject *self, PyObject *args) {
    PyObject *shards_obj, *keys_o, *qs_o, *qe_o, *up_o, *hi_o, *llo_o, *lhi_o;
    int threads, check, force;
    if (!PyArg_ParseTuple(args, "O!OOOOOOOipi", &PyTuple_Type, &shards_obj, &keys_o, &qs_o, &qe_o, &up_o,
                          &hi_o, &llo_o, &lhi_o, &threads, &check, &force))
        return NULL;
    Py_ssize_t ns = PyTuple_GET_SIZE(shards_obj);
    for (Py_ssize_t i = 0; i < ns; i++) {
        if (!PyObject_TypeCheck(PyTuple_GET_ITEM(shards_obj, i), &ShardType)) {
            PyErr_SetString(PyExc_TypeError, "shards must be a tuple of Shard");
            return NULL;
        }
    }
    Py_buffer keys, qs, qe, up, hi, llo, lhi;
    if (readable(keys_o, &keys, -1, "keys") != 0) return NULL;
    if (readable(qs_o, &qs, -1, "qstart") != 0) { PyBuffer_Release(&keys); return NULL; }
    Py_ssize_t m = qs.len / 8;
    PyObject *result = NULL;
    int got = 0;
    if (readable(qe_o, &qe, m * 8, "qend") != 0) goto release;
    got = 1;
    if (readable(up_o, &up, m, "upper") != 0) goto release;
    got = 2;
    if (writable(hi_o, &hi, ns * m * 8, "out_hi") != 0) goto release;
    got = 3;
    if (writable(llo_o, &llo, ns * m * 8, "out_llo") != 0) goto release;
    got = 4;
    if (writable(lhi_o, &lhi, ns * m * 8, "out_lhi") != 0) goto release;
    got = 5;
    const int64_t *qsv = qs.buf, *qev = qe.buf;
    Py_ssize_t nkeys = keys.len / 4;
    for (Py_ssize_t r = 0; r < m; r++) {
        if (qsv[r] < 0 || qev[r] <= qsv[r] || qev[r] > nkeys) {
            PyErr_SetString(PyExc_ValueError, "every query row must be a non-empty range of the keys");
            goto release;
        }
    }
    {
        Query q = {keys.buf, qsv, qev, up.buf, m};
        Shard **sh = malloc(sizeof(Shard *) * (ns ? ns : 1));
        int64_t *bad = malloc(sizeof(int64_t) * (ns ? ns : 1));
        if (!sh || !bad) { free(sh); free(bad); PyErr_NoMemory(); goto release; }
        for (Py_ssize_t i = 0; i < ns; i++) { sh[i] = (Shard *)PyTuple_GET_ITEM(shards_obj, i); bad[i] = -1; }
        Job job = {sh, ns, &q, check, force, hi.buf, llo.buf, lhi.buf, bad, 0, PTHREAD_MUTEX_INITIALIZER, 0};
        if (threads < 1) threads = 1;
        if (threads > MAX_THREADS) threads = MAX_THREADS;
        if (threads > ns) threads = (int)(ns ? ns : 1);
        Py_BEGIN_ALLOW_THREADS
        pthread_t tid[MAX_THREADS];
        int started = 0;
        for (int t = 1; t < threads; t++) {
            if (pthread_create(&tid[started], NULL, worker, &job) == 0) started++;
        }
        worker(&job);  /* this thread takes shards too */
        for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
        Py_END_ALLOW_THREADS
        if (job.failed_alloc) {
            PyErr_NoMemory();
        } else {
            result = PyList_New(ns);
            for (Py_ssize_t i = 0; result && i < ns; i++) PyList_SET_ITEM(result, i, PyLong_FromLongLong(bad[i]));
        }
        free(sh); free(bad);
    }
release:
    if (got >= 5) PyBuffer_Release(&lhi);
    if (got >= 4) PyBuffer_Release(&llo);
    if (got >= 3) PyBuffer_Release(&hi);
    if (got >= 2) PyBuffer_Release(&up);
    if (got >= 1) PyBuffer_Release(&qe);
    PyBuffer_Release(&qs);
    PyBuffer_Release(&keys);
    return result;
}

static void shard_dealloc(Shard *s) {
    Py_buffer *views[] = {&s->ds, &s->sa, &s->bkeys, &s->bstarts, &s->bends, &s->skeys, &s->slens};
    for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++)
        if (views[i]->obj) PyBuffer_Release(views[i]);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* Shard(ds, sa, width, ptr_size, block_keys, block_starts, block_ends, sample_keys, sample_lengths,
 * stride): the buffers stay held (the searches read them); block and sample arrays may be None. */
static PyObject *shard_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *ds, *sa, *bk, *bs, *be, *sk, *sl;
    int width, ptr_size;
    long long stride;
    if (!PyArg_ParseTuple(args, "OOiiOOOOOL", &ds, &sa, &width, &ptr_size, &bk, &bs, &be, &sk, &sl, &stride))
        return NULL;
    if ((width != 2 && width != 4) || ptr_size < 1 || ptr_size > 8) {
        PyErr_SetString(PyExc_ValueError, "token width must be 2 or 4 and pointers 1 to 8 bytes");
        return NULL;
    }
    Shard *s = (Shard *)type->tp_alloc(type, 0);
    if (!s) return NULL;
    s->width = width; s->ptr_size = ptr_size; s->faulted = 1;
    if (readable(ds, &s->ds, -1, "ds") != 0 || readable(sa, &s->sa, -1, "sa") != 0) goto fail;
    s->n = s->ds.len / width;
    if (s->sa.len != s->n * ptr_size) {
        PyErr_SetString(PyExc_ValueError, "the suffix array does not hold one pointer per token");
        goto fail;
    }
    if (bk != Py_None) {
        if (readable(bk, &s->bkeys, -1, "block_keys") != 0) goto fail;
        if (readable(bs, &s->bstarts, s->bkeys.len, "block_starts") != 0) goto fail;
        if (readable(be, &s->bends, s->bkeys.len, "block_ends") != 0) goto fail;
        s->have_blocks = s->bkeys.len > 0;
    }
    if (sk != Py_None) {
        if (readable(sk, &s->skeys, -1, "sample_keys") != 0 || readable(sl, &s->slens, -1, "sample_lengths") != 0)
            goto fail;
        s->nsamples = s->slens.len;
        if (stride < 1 || s->nsamples == 0 || s->skeys.len % s->nsamples) {
            PyErr_SetString(PyExc_ValueError, "samples need a stride and one row of keys per sample");
            goto fail;
        }
        int row = (int)(s->skeys.len / s->nsamples);
        s->skey_size = s->skeys.itemsize == 2 || s->skeys.itemsize == 4 ? (int)s->skeys.itemsize : 0;
        if (!s->skey_size) {
            PyErr_SetString(PyExc_ValueError, "sample keys must be 2- or 4-byte integers");
            goto fail;
        }
        s->stokens = row / s->skey_size;
        s->stride = stride;
        s->have_samples = 1;
    }
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

static PyTypeObject ShardType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "propme_metrics.index.native_ext.Shard",
    .tp_basicsize = sizeof(Shard),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One shard's mapped files and in-memory samples, held for `search`.",
    .tp_new = shard_new,
    .tp_dealloc = (destructor)shard_dealloc,
};

static PyMethodDef methods[] = {
    {"search", search, METH_VARARGS, "Bounds of a batch of query rows in every shard (see native_ext.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "native_ext", "Native suffix-array search.", -1, methods};

PyMODINIT_FUNC PyInit_native_ext(void) {
    page_size = sysconf(_SC_PAGESIZE);
    if (page_size <= 0) page_size = 4096;
    if (PyType_Ready(&ShardType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ShardType);
    if (PyModule_AddObject(m, "Shard", (PyObject *)&ShardType) < 0) {
        Py_DECREF(&ShardType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
