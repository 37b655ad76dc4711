// Package camunda is a model of the rules by which Camunda 8.9's S3 node-ID
// provider (io.camunda.zeebe.dynamic.nodeid) reads and writes its lease
// objects and data-directory markers, so that the tests of other packages
// can check that what nodeid writes is what Camunda would accept, and can
// run a Camunda-like broker against the same bucket as nodeid.
//
// It is written from the format and the documented behaviour, not from
// Camunda's code. The readers are strict on purpose: Camunda parses with a
// default Jackson ObjectMapper, which rejects unknown fields, so a field
// that Go would silently ignore makes a lease unreadable for Camunda (and
// Camunda then cannot acquire that node ID). To keep the model honest,
// JacksonCheck runs a small Java program of ours (jackson/StrictCheck.java)
// with the real Jackson parser, and this package's tests compare the two on
// a table of bodies.
//
// The package is imported only by tests.
package camunda
