/*
 * Minato's stream list for libsrtp2, compiled into the private static build by
 * scripts/build-libsrtp.sh with -DSRTP_NO_STREAM_LIST (libsrtp's own hook for replacing its
 * list: include/stream_list_priv.h).
 *
 * Every srtp_protect and srtp_unprotect looks its stream up by SSRC. libsrtp's list threads the
 * stream structures themselves (several cache lines each, far apart), so a lookup in a session
 * with a few streams, e.g. a listener's transport carrying five speakers, walks through cache
 * misses: 4% of the server's CPU in the audio-50 benchmark. Here the SSRCs sit in one dense array
 * scanned in order, and only the stream found is touched. The first INLINE_STREAMS entries live
 * in the list's own cache-aligned structure (no second allocation to reach);
 * more move to arrays that grow by doubling when a stream is added (libsrtp allocates the stream
 * itself at that moment anyway). Nothing allocates on lookup. Order does not matter: removal
 * moves the last entry into the hole.
 */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "srtp_priv.h"
#include "stream_list_priv.h"
#include "alloc.h"

#define INLINE_STREAMS 8

/* 128 bytes on a cache-line boundary: the counts, the SSRCs and the first stream pointer share
 * the first line, so a session of one stream costs one line here. */
struct srtp_stream_list_ctx_t_ {
    uint32_t count;
    uint32_t capacity;
    uint32_t *ssrcs;        /* inline_ssrcs, or an allocation once more are held */
    srtp_stream_t *streams; /* inline_streams, or an allocation */
    uint32_t inline_ssrcs[INLINE_STREAMS];
    srtp_stream_t inline_streams[INLINE_STREAMS];
} __attribute__((aligned(64))); /* sizeof: 128, a multiple of the alignment, as aligned_alloc needs */

_Static_assert(sizeof(struct srtp_stream_list_ctx_t_) == 128, "two cache lines");

srtp_err_status_t srtp_stream_list_alloc(srtp_stream_list_t *list_ptr)
{
    srtp_stream_list_t list = aligned_alloc(64, sizeof(*list));
    if (list == NULL) {
        return srtp_err_status_alloc_fail;
    }
    memset(list, 0, sizeof(*list));
    list->ssrcs = list->inline_ssrcs;
    list->streams = list->inline_streams;
    list->capacity = INLINE_STREAMS;
    *list_ptr = list;
    return srtp_err_status_ok;
}

static void free_arrays(srtp_stream_list_t list)
{
    if (list->ssrcs != list->inline_ssrcs) {
        srtp_crypto_free(list->ssrcs);
    }
    if (list->streams != list->inline_streams) {
        srtp_crypto_free(list->streams);
    }
}

srtp_err_status_t srtp_stream_list_dealloc(srtp_stream_list_t list)
{
    if (list->count != 0) {
        return srtp_err_status_fail; /* the list must be empty */
    }
    free_arrays(list);
    free(list);
    return srtp_err_status_ok;
}

srtp_err_status_t srtp_stream_list_insert(srtp_stream_list_t list,
                                          srtp_stream_t stream)
{
    if (list->count == list->capacity) {
        if (list->capacity > UINT32_MAX / 2) {
            return srtp_err_status_alloc_fail;
        }
        uint32_t capacity = list->capacity * 2;
        uint32_t *ssrcs = srtp_crypto_alloc(capacity * sizeof(uint32_t));
        srtp_stream_t *streams = srtp_crypto_alloc(capacity * sizeof(srtp_stream_t));
        if (ssrcs == NULL || streams == NULL) {
            if (ssrcs != NULL) {
                srtp_crypto_free(ssrcs);
            }
            if (streams != NULL) {
                srtp_crypto_free(streams);
            }
            return srtp_err_status_alloc_fail;
        }
        memcpy(ssrcs, list->ssrcs, list->count * sizeof(uint32_t));
        memcpy(streams, list->streams, list->count * sizeof(srtp_stream_t));
        free_arrays(list);
        list->ssrcs = ssrcs;
        list->streams = streams;
        list->capacity = capacity;
    }
    list->ssrcs[list->count] = stream->ssrc;
    list->streams[list->count] = stream;
    list->count++;
    return srtp_err_status_ok;
}

srtp_stream_t srtp_stream_list_get(srtp_stream_list_t list, uint32_t ssrc)
{
    const uint32_t *ssrcs = list->ssrcs;
    for (uint32_t i = 0; i < list->count; i++) {
        if (ssrcs[i] == ssrc) {
            return list->streams[i];
        }
    }
    return NULL;
}

void srtp_stream_list_remove(srtp_stream_list_t list,
                             srtp_stream_t stream_to_remove)
{
    for (uint32_t i = 0; i < list->count; i++) {
        if (list->streams[i] == stream_to_remove) {
            uint32_t last = list->count - 1;
            list->ssrcs[i] = list->ssrcs[last];
            list->streams[i] = list->streams[last];
            list->count = last;
            return;
        }
    }
}

/* From the last entry to the first, so that the callback may remove the stream it was given:
 * the entry moved into its place was visited already. */
void srtp_stream_list_for_each(srtp_stream_list_t list,
                               int (*callback)(srtp_stream_t, void *),
                               void *data)
{
    uint32_t i = list->count;
    while (i > 0) {
        i--;
        if (i >= list->count) {
            continue; /* the callback removed more than its own stream */
        }
        if (callback(list->streams[i], data)) {
            break;
        }
    }
}
