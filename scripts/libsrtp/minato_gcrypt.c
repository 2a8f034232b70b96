/*
 * Minato's ciphers for libsrtp2 on Debian's libgcrypt (and its HMAC on nettle), compiled into
 * the private static build by scripts/build-libsrtp.sh and put in place of libsrtp's OpenSSL
 * ones by `minato_srtp_use_gcrypt` (libsrtp's srtp_replace_cipher_type / srtp_replace_auth_type,
 * which first run each replacement against libsrtp's own test cases and those of the type it
 * replaces):
 *   - AES-GCM (AEAD_AES_128_GCM, AEAD_AES_256_GCM; RFC 7714), libgcrypt;
 *   - AES-ICM, AES counter mode (AES_CM_128 and 256; RFC 3711 4.1.1), also libsrtp's key
 *     derivation, libgcrypt;
 *   - HMAC-SHA1 (RFC 3711 4.2.1), nettle (below: libgcrypt's allocates per MAC).
 *
 * Why: through OpenSSL 3's EVP interface every packet pays for provider dispatch and parameter
 * lookups by name (for GCM the IV length read back when the IV is set and the tag fetched with a
 * ctrl that becomes an OSSL_PARAM array: about 2,500 of the 3,800 instructions of protecting a
 * 100-byte packet). libgcrypt's calls go straight to its AES-NI/VAES, carry-less-multiply and
 * SHA extension code. Measured on this project's VM (bench/srtp-protect.sh, srtp_protect of
 * sessions taken round-robin): GCM 369 -> 190 ns for a 100-byte packet and 629 -> 481 ns for a
 * 1,200-byte one. Same outputs.
 *
 * Nothing here allocates per packet: each libgcrypt handle (and nettle's HMAC structure) is made
 * when libsrtp allocates the cipher or auth function (a session's stream is created) and freed
 * when it frees it.
 */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <gcrypt.h>
#include <nettle/hmac.h>
#include <nettle/sha1.h>

#include "srtp.h"
#include "cipher.h"
#include "auth.h"
#include "crypto_kernel.h"

#define MINATO_GCM_IV_LEN 12

/* libsrtp's own known answers (crypto/cipher/cipher_test_cases.c, crypto/hash/auth_test_cases.c). */
extern const srtp_cipher_test_case_t srtp_aes_gcm_128_test_case_0;
extern const srtp_cipher_test_case_t srtp_aes_gcm_256_test_case_0;
extern const srtp_cipher_test_case_t srtp_aes_icm_128_test_case_0;
extern const srtp_cipher_test_case_t srtp_aes_icm_256_test_case_0;
extern const srtp_auth_test_case_t srtp_hmac_test_case_0;

/* Allocates a libsrtp cipher whose state (`state_size` bytes, zeroed) begins with a libgcrypt
 * handle, opened for `algo` in `mode`. Shared by the GCM and counter-mode types. */
static srtp_err_status_t minato_cipher_alloc(srtp_cipher_t **c, const srtp_cipher_type_t *type, int algorithm,
                                             int key_len, int algo, int mode, size_t state_size)
{
    srtp_cipher_t *cipher = calloc(1, sizeof(srtp_cipher_t));
    gcry_cipher_hd_t *state = calloc(1, state_size);
    if (cipher == NULL || state == NULL || gcry_cipher_open(state, algo, mode, 0) != 0) {
        free(cipher);
        free(state);
        *c = NULL;
        return srtp_err_status_alloc_fail;
    }
    cipher->type = type;
    cipher->state = state;
    cipher->key_len = key_len;
    cipher->algorithm = algorithm;
    *c = cipher;
    return srtp_err_status_ok;
}

/* Closes the handle (which wipes its key schedule), wipes the rest of the state, frees both. */
static srtp_err_status_t minato_cipher_dealloc(srtp_cipher_t *c, size_t state_size)
{
    gcry_cipher_hd_t *state = c->state;
    if (state != NULL) {
        gcry_cipher_close(*state);
        memset(state, 0, state_size);
        free(state);
    }
    free(c);
    return srtp_err_status_ok;
}

typedef struct {
    gcry_cipher_hd_t hd; /* first: minato_cipher_alloc opens it */
    int key_size;
    int tag_len;
    srtp_cipher_direction_t dir;
} minato_gcm_state_t;

extern const srtp_cipher_type_t minato_gcrypt_gcm_128;
extern const srtp_cipher_type_t minato_gcrypt_gcm_256;

static srtp_err_status_t minato_gcm_alloc(srtp_cipher_t **c, int key_len, int tag_len)
{
    int algo;
    const srtp_cipher_type_t *type;
    int algorithm;
    int key_size;
    if (key_len == SRTP_AES_GCM_128_KEY_LEN_WSALT) {
        algo = GCRY_CIPHER_AES128;
        type = &minato_gcrypt_gcm_128;
        algorithm = SRTP_AES_GCM_128;
        key_size = SRTP_AES_128_KEY_LEN;
    } else if (key_len == SRTP_AES_GCM_256_KEY_LEN_WSALT) {
        algo = GCRY_CIPHER_AES256;
        type = &minato_gcrypt_gcm_256;
        algorithm = SRTP_AES_GCM_256;
        key_size = SRTP_AES_256_KEY_LEN;
    } else {
        return srtp_err_status_bad_param;
    }
    /* RFC 7714's 16-octet tag; libsrtp's 8-octet variant as its OpenSSL cipher allows it. */
    if (tag_len != 16 && tag_len != 8) {
        return srtp_err_status_bad_param;
    }
    srtp_cipher_t *cipher = NULL;
    srtp_err_status_t status = minato_cipher_alloc(&cipher, type, algorithm, key_len, algo, GCRY_CIPHER_MODE_GCM,
                                                   sizeof(minato_gcm_state_t));
    if (status != srtp_err_status_ok) {
        *c = NULL;
        return status;
    }
    minato_gcm_state_t *state = cipher->state;
    state->key_size = key_size;
    state->tag_len = tag_len;
    state->dir = srtp_direction_any;
    *c = cipher;
    return srtp_err_status_ok;
}

static srtp_err_status_t minato_gcm_dealloc(srtp_cipher_t *c)
{
    return minato_cipher_dealloc(c, sizeof(minato_gcm_state_t));
}

static srtp_err_status_t minato_gcm_init(void *cv, const uint8_t *key)
{
    minato_gcm_state_t *c = cv;
    c->dir = srtp_direction_any;
    if (gcry_cipher_setkey(c->hd, key, (size_t)c->key_size) != 0) {
        return srtp_err_status_init_fail;
    }
    return srtp_err_status_ok;
}

static srtp_err_status_t minato_gcm_set_iv(void *cv, uint8_t *iv, srtp_cipher_direction_t direction)
{
    minato_gcm_state_t *c = cv;
    if (direction != srtp_direction_encrypt && direction != srtp_direction_decrypt) {
        return srtp_err_status_bad_param;
    }
    c->dir = direction;
    /* Starts a new message: the hash, the counter and the lengths are reset. */
    if (gcry_cipher_setiv(c->hd, iv, MINATO_GCM_IV_LEN) != 0) {
        return srtp_err_status_init_fail;
    }
    return srtp_err_status_ok;
}

static srtp_err_status_t minato_gcm_set_aad(void *cv, const uint8_t *aad, uint32_t aad_len)
{
    minato_gcm_state_t *c = cv;
    if (gcry_cipher_authenticate(c->hd, aad, aad_len) != 0) {
        return srtp_err_status_algo_fail;
    }
    return srtp_err_status_ok;
}

static srtp_err_status_t minato_gcm_encrypt(void *cv, uint8_t *buf, unsigned int *len)
{
    minato_gcm_state_t *c = cv;
    if (c->dir != srtp_direction_encrypt && c->dir != srtp_direction_decrypt) {
        return srtp_err_status_bad_param;
    }
    if (gcry_cipher_encrypt(c->hd, buf, *len, NULL, 0) != 0) {
        return srtp_err_status_cipher_fail;
    }
    return srtp_err_status_ok;
}

/* `buf` holds the ciphertext followed by the tag; on success `*len` loses the tag. */
static srtp_err_status_t minato_gcm_decrypt(void *cv, uint8_t *buf, unsigned int *len)
{
    minato_gcm_state_t *c = cv;
    if (c->dir != srtp_direction_encrypt && c->dir != srtp_direction_decrypt) {
        return srtp_err_status_bad_param;
    }
    if (*len < (unsigned int)c->tag_len) {
        return srtp_err_status_auth_fail;
    }
    unsigned int plain = *len - (unsigned int)c->tag_len;
    if (gcry_cipher_decrypt(c->hd, buf, plain, NULL, 0) != 0) {
        return srtp_err_status_cipher_fail;
    }
    if (gcry_cipher_checktag(c->hd, buf + plain, (size_t)c->tag_len) != 0) {
        return srtp_err_status_auth_fail;
    }
    *len = plain;
    return srtp_err_status_ok;
}

static srtp_err_status_t minato_gcm_get_tag(void *cv, uint8_t *tag, uint32_t *len)
{
    minato_gcm_state_t *c = cv;
    if (gcry_cipher_gettag(c->hd, tag, (size_t)c->tag_len) != 0) {
        return srtp_err_status_algo_fail;
    }
    *len = (uint32_t)c->tag_len;
    return srtp_err_status_ok;
}

const srtp_cipher_type_t minato_gcrypt_gcm_128 = {
    minato_gcm_alloc,   minato_gcm_dealloc, minato_gcm_init,    minato_gcm_set_aad,
    minato_gcm_encrypt, minato_gcm_decrypt, minato_gcm_set_iv,  minato_gcm_get_tag,
    "AES-128 GCM using libgcrypt", &srtp_aes_gcm_128_test_case_0, SRTP_AES_GCM_128
};

const srtp_cipher_type_t minato_gcrypt_gcm_256 = {
    minato_gcm_alloc,   minato_gcm_dealloc, minato_gcm_init,    minato_gcm_set_aad,
    minato_gcm_encrypt, minato_gcm_decrypt, minato_gcm_set_iv,  minato_gcm_get_tag,
    "AES-256 GCM using libgcrypt", &srtp_aes_gcm_256_test_case_0, SRTP_AES_GCM_256
};

/* ---- AES-ICM: AES in counter mode, the counter starting at (salt || 0x0000) XOR the IV ---- */

#define MINATO_ICM_BLOCK 16

typedef struct {
    gcry_cipher_hd_t hd; /* first: minato_cipher_alloc opens it */
    int key_size;
    uint8_t offset[MINATO_ICM_BLOCK]; /* the 14-octet salt, then two zero octets */
} minato_icm_state_t;

extern const srtp_cipher_type_t minato_gcrypt_icm_128;
extern const srtp_cipher_type_t minato_gcrypt_icm_256;

static srtp_err_status_t minato_icm_alloc(srtp_cipher_t **c, int key_len, int tag_len)
{
    (void)tag_len;
    int algo;
    const srtp_cipher_type_t *type;
    int algorithm;
    int key_size;
    if (key_len == SRTP_AES_ICM_128_KEY_LEN_WSALT) {
        algo = GCRY_CIPHER_AES128;
        type = &minato_gcrypt_icm_128;
        algorithm = SRTP_AES_ICM_128;
        key_size = SRTP_AES_128_KEY_LEN;
    } else if (key_len == SRTP_AES_ICM_256_KEY_LEN_WSALT) {
        algo = GCRY_CIPHER_AES256;
        type = &minato_gcrypt_icm_256;
        algorithm = SRTP_AES_ICM_256;
        key_size = SRTP_AES_256_KEY_LEN;
    } else {
        return srtp_err_status_bad_param;
    }
    srtp_cipher_t *cipher = NULL;
    srtp_err_status_t status = minato_cipher_alloc(&cipher, type, algorithm, key_len, algo, GCRY_CIPHER_MODE_CTR,
                                                   sizeof(minato_icm_state_t));
    if (status != srtp_err_status_ok) {
        *c = NULL;
        return status;
    }
    minato_icm_state_t *state = cipher->state;
    state->key_size = key_size;
    *c = cipher;
    return srtp_err_status_ok;
}

static srtp_err_status_t minato_icm_dealloc(srtp_cipher_t *c)
{
    return minato_cipher_dealloc(c, sizeof(minato_icm_state_t));
}

/* `key` is the AES key followed by the 14-octet salt. */
static srtp_err_status_t minato_icm_init(void *cv, const uint8_t *key)
{
    minato_icm_state_t *c = cv;
    memset(c->offset, 0, sizeof c->offset);
    memcpy(c->offset, key + c->key_size, SRTP_SALT_LEN);
    if (gcry_cipher_setkey(c->hd, key, (size_t)c->key_size) != 0) {
        return srtp_err_status_init_fail;
    }
    return srtp_err_status_ok;
}

/* `iv` is 16 octets; the counter block is it XOR the offset (RFC 3711 4.1.1). */
static srtp_err_status_t minato_icm_set_iv(void *cv, uint8_t *iv, srtp_cipher_direction_t direction)
{
    (void)direction;
    minato_icm_state_t *c = cv;
    uint8_t counter[MINATO_ICM_BLOCK];
    for (int i = 0; i < MINATO_ICM_BLOCK; i++) {
        counter[i] = iv[i] ^ c->offset[i];
    }
    if (gcry_cipher_setctr(c->hd, counter, MINATO_ICM_BLOCK) != 0) {
        return srtp_err_status_init_fail;
    }
    return srtp_err_status_ok;
}

/* Counter mode: encrypting and decrypting are the same XOR with the key stream. */
static srtp_err_status_t minato_icm_encrypt(void *cv, uint8_t *buf, unsigned int *len)
{
    minato_icm_state_t *c = cv;
    if (gcry_cipher_encrypt(c->hd, buf, *len, NULL, 0) != 0) {
        return srtp_err_status_cipher_fail;
    }
    return srtp_err_status_ok;
}

const srtp_cipher_type_t minato_gcrypt_icm_128 = {
    minato_icm_alloc,   minato_icm_dealloc, minato_icm_init,    NULL,
    minato_icm_encrypt, minato_icm_encrypt, minato_icm_set_iv,  NULL,
    "AES-128 counter mode using libgcrypt", &srtp_aes_icm_128_test_case_0, SRTP_AES_ICM_128
};

const srtp_cipher_type_t minato_gcrypt_icm_256 = {
    minato_icm_alloc,   minato_icm_dealloc, minato_icm_init,    NULL,
    minato_icm_encrypt, minato_icm_encrypt, minato_icm_set_iv,  NULL,
    "AES-256 counter mode using libgcrypt", &srtp_aes_icm_256_test_case_0, SRTP_AES_ICM_256
};

/* ---- HMAC-SHA1, on nettle: libgcrypt's HMAC allocates a hash context each time it finishes a
 * MAC (gcry_mac_read), nettle's keeps the keyed states in its own structure and allocates
 * nothing. Only nettle's documented calls are used: its digest leaves the structure ready for
 * the next message under the same key, so `start` only has to re-key after a message that was
 * begun and never finished (libsrtp does not do that, but nothing here relies on it). ---- */

#define MINATO_SHA1_LEN SHA1_DIGEST_SIZE
#define MINATO_HMAC_MAX_KEY SHA1_BLOCK_SIZE

typedef struct {
    struct hmac_sha1_ctx ctx;
    uint8_t key[MINATO_HMAC_MAX_KEY];
    size_t key_len;
    int pending; /* data hashed since the last MAC */
} minato_hmac_state_t;

extern const srtp_auth_type_t minato_nettle_hmac;

static srtp_err_status_t minato_hmac_alloc(srtp_auth_t **a, int key_len, int out_len)
{
    if (out_len < 0 || out_len > MINATO_SHA1_LEN || key_len < 0 || key_len > MINATO_HMAC_MAX_KEY) {
        return srtp_err_status_bad_param;
    }
    srtp_auth_t *auth = calloc(1, sizeof(srtp_auth_t));
    minato_hmac_state_t *state = calloc(1, sizeof(minato_hmac_state_t));
    if (auth == NULL || state == NULL) {
        free(auth);
        free(state);
        *a = NULL;
        return srtp_err_status_alloc_fail;
    }
    auth->type = &minato_nettle_hmac;
    auth->state = state;
    auth->out_len = out_len;
    auth->key_len = key_len;
    auth->prefix_len = 0;
    *a = auth;
    return srtp_err_status_ok;
}

static srtp_err_status_t minato_hmac_dealloc(srtp_auth_t *a)
{
    minato_hmac_state_t *state = a->state;
    if (state != NULL) {
        memset(state, 0, sizeof *state); /* the key and the keyed states */
        free(state);
    }
    free(a);
    return srtp_err_status_ok;
}

static srtp_err_status_t minato_hmac_init(void *statev, const uint8_t *key, int key_len)
{
    minato_hmac_state_t *state = statev;
    if (key_len < 0 || key_len > MINATO_HMAC_MAX_KEY) {
        return srtp_err_status_bad_param;
    }
    memcpy(state->key, key, (size_t)key_len);
    state->key_len = (size_t)key_len;
    hmac_sha1_set_key(&state->ctx, state->key_len, state->key);
    state->pending = 0;
    return srtp_err_status_ok;
}

/* A new message under the same key. */
static srtp_err_status_t minato_hmac_start(void *statev)
{
    minato_hmac_state_t *state = statev;
    if (state->pending) {
        hmac_sha1_set_key(&state->ctx, state->key_len, state->key);
        state->pending = 0;
    }
    return srtp_err_status_ok;
}

static srtp_err_status_t minato_hmac_update(void *statev, const uint8_t *message, int octets)
{
    minato_hmac_state_t *state = statev;
    if (octets < 0) {
        return srtp_err_status_bad_param;
    }
    hmac_sha1_update(&state->ctx, (size_t)octets, message);
    state->pending = 1;
    return srtp_err_status_ok;
}

/* Hashes the last part of the message and writes the first `tag_len` octets of the MAC. */
static srtp_err_status_t minato_hmac_compute(void *statev, const uint8_t *message, int octets, int tag_len,
                                             uint8_t *result)
{
    minato_hmac_state_t *state = statev;
    uint8_t mac[MINATO_SHA1_LEN];
    if (tag_len < 0 || tag_len > MINATO_SHA1_LEN || octets < 0) {
        return srtp_err_status_bad_param;
    }
    hmac_sha1_update(&state->ctx, (size_t)octets, message);
    hmac_sha1_digest(&state->ctx, sizeof mac, mac); /* and ready for the next message */
    state->pending = 0;
    memcpy(result, mac, (size_t)tag_len);
    return srtp_err_status_ok;
}

const srtp_auth_type_t minato_nettle_hmac = {
    minato_hmac_alloc,   minato_hmac_dealloc, minato_hmac_init,   minato_hmac_compute,
    minato_hmac_update,  minato_hmac_start,   "hmac sha-1 using nettle",
    &srtp_hmac_test_case_0, SRTP_HMAC_SHA1
};

/*
 * Call once after srtp_init: initialises libgcrypt (if nothing in the process did) and puts the
 * types above in place of OpenSSL's. Sessions created before keep what they have.
 */
srtp_err_status_t minato_srtp_use_gcrypt(void)
{
    if (!gcry_control(GCRYCTL_INITIALIZATION_FINISHED_P)) {
        if (gcry_check_version(GCRYPT_VERSION) == NULL) {
            return srtp_err_status_init_fail;
        }
        /* Keys live in ordinary memory, as they do in libsrtp's other backends. */
        gcry_control(GCRYCTL_DISABLE_SECMEM, 0);
        gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
    }
    const srtp_cipher_type_t *ciphers[] = {
        &minato_gcrypt_gcm_128, &minato_gcrypt_gcm_256, &minato_gcrypt_icm_128, &minato_gcrypt_icm_256
    };
    for (size_t i = 0; i < sizeof ciphers / sizeof ciphers[0]; i++) {
        srtp_err_status_t status = srtp_replace_cipher_type(ciphers[i], ciphers[i]->id);
        if (status != srtp_err_status_ok) {
            return status;
        }
    }
    return srtp_replace_auth_type(&minato_nettle_hmac, SRTP_HMAC_SHA1);
}

/* Copies `text` into `out` (at most capacity - 1 bytes, NUL-terminated); returns its length. */
static size_t minato_copy_text(const char *text, char *out, size_t capacity)
{
    size_t n = strlen(text);
    if (n >= capacity) {
        n = capacity - 1;
    }
    memcpy(out, text, n);
    out[n] = 0;
    return n;
}

/*
 * The description of the cipher libsrtp allocates for `id` now (what a new session would use),
 * copied into `out` (NUL-terminated); 0 if none.
 */
size_t minato_srtp_cipher_description(int id, char *out, size_t capacity)
{
    int key_len;
    switch (id) {
    case SRTP_AES_GCM_128: key_len = SRTP_AES_GCM_128_KEY_LEN_WSALT; break;
    case SRTP_AES_GCM_256: key_len = SRTP_AES_GCM_256_KEY_LEN_WSALT; break;
    case SRTP_AES_ICM_128: key_len = SRTP_AES_ICM_128_KEY_LEN_WSALT; break;
    case SRTP_AES_ICM_256: key_len = SRTP_AES_ICM_256_KEY_LEN_WSALT; break;
    default: return 0;
    }
    srtp_cipher_t *c = NULL;
    int tag_len = (id == SRTP_AES_GCM_128 || id == SRTP_AES_GCM_256) ? 16 : 0;
    if (capacity == 0 || srtp_crypto_kernel_alloc_cipher((srtp_cipher_type_id_t)id, &c, key_len, tag_len) != srtp_err_status_ok) {
        return 0;
    }
    size_t n = minato_copy_text(c->type->description, out, capacity);
    srtp_cipher_dealloc(c);
    return n;
}

/* The same for the HMAC-SHA1 auth function. */
size_t minato_srtp_hmac_description(char *out, size_t capacity)
{
    srtp_auth_t *a = NULL;
    if (capacity == 0 || srtp_crypto_kernel_alloc_auth(SRTP_HMAC_SHA1, &a, 20, 10) != srtp_err_status_ok) {
        return 0;
    }
    size_t n = minato_copy_text(a->type->description, out, capacity);
    srtp_auth_dealloc(a);
    return n;
}
