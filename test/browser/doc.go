// Package browser drives the dashboard in headless Chromium through
// chromedriver (the WebDriver HTTP protocol, no npm toolchain): it serves
// the real API on a seeded store, opens the dashboard with a viewer token,
// checks that the charts and tables show the seeded data and follow a
// change, and saves screenshots. install.sh installs Debian's chromium and
// chromium-driver; the test runs it itself when they are missing.
package browser
