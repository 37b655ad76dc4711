package main

// Mozilla's roots, used only when the system has none (SSL_CERT_FILE,
// SSL_CERT_DIR and the usual paths all empty): the release image is built
// from scratch and must still reach S3 over TLS. See docs/image.md.
import _ "golang.org/x/crypto/x509roots/fallback"
