# Sourced by the scripts that run `swift`: points pkg-config at the OpenSSL-backed libsrtp2 that
# scripts/build-libsrtp.sh builds (the Makefile exports the same).
LIBSRTP_OPENSSL_PREFIX="${LIBSRTP_OPENSSL_PREFIX:-$HOME/.cache/minato/libsrtp2-openssl}"
case ":${PKG_CONFIG_PATH:-}:" in
    *":$LIBSRTP_OPENSSL_PREFIX/lib/pkgconfig:"*) ;;
    *) export PKG_CONFIG_PATH="$LIBSRTP_OPENSSL_PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" ;;
esac
export LIBSRTP_OPENSSL_PREFIX
