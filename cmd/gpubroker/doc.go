// Command gpubroker is the broker binary: serve, demo, migrate, plan (dry
// run), inspect and version. Only this package reads flags, environment
// variables and configuration files; everything below it takes Config
// structs.
package main
