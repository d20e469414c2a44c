package store

// MapErrorForTest exposes mapError to the external tests.
var MapErrorForTest = mapError
