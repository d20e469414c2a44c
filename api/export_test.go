package api

// UnauditedForTest lists the write routes that leave no audit entry.
var UnauditedForTest = unaudited
