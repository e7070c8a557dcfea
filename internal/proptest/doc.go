// Package proptest is the shared machinery of fleetlimit's property tests
// (algorithm's property and twin tests, the root package's multi-instance
// tests and fuzz targets): the run's seed and scale, the stores every
// property runs on, the generators of strategies and timelines, and a
// limiter on a virtual clock that decides them. docs/guarantees.md says what
// each property proves.
//
// Epoch is the one fixed instant of every test package's step tables and
// pinned clocks, whether or not it generates timelines. Example functions
// write their instants out instead: they are documentation, and users
// cannot import an internal package.
package proptest
