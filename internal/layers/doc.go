// Package layers holds the test that mbench's packages depend one way:
// each imports only packages of lower layers (docs/development.md).
package layers
