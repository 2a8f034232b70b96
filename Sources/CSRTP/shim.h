#include <srtp2/srtp.h>
#include <srtp2/crypto_types.h>
#include <stddef.h>

/* In the private libsrtp2 build (scripts/build-libsrtp.sh, scripts/libsrtp/minato_gcrypt.c). */

/// Call once after srtp_init: AES-GCM and AES-CM (128 and 256 each) on libgcrypt and HMAC-SHA1
/// on nettle in place of OpenSSL's, each checked first against libsrtp's known answers.
srtp_err_status_t minato_srtp_use_gcrypt(void);
/// The description of the cipher libsrtp would allocate for `id` (SRTP_AES_GCM_128, …) now,
/// NUL-terminated in `out`; returns its length, 0 if none.
size_t minato_srtp_cipher_description(int id, char *out, size_t capacity);
/// The same for its HMAC-SHA1 authentication function.
size_t minato_srtp_hmac_description(char *out, size_t capacity);
