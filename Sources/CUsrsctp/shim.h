// usrsctp (Debian libusrsctp-dev): SCTP in user space, for WebRTC data channels (RFC 8831)
// carried in DTLS application records. Minato runs it without its threads
// (usrsctp_init_nothreads) on AF_CONN sockets (SctpAssociation.swift).
#include <usrsctp.h>
