package yarn

import "time"

// SetLockWait bounds how long f waits for another writer's lock, for
// tests that hold it.
func SetLockWait(f *ExcludeFile, d time.Duration) { f.lockWait = d }
