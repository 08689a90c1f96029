package cli

// ChangedSinceRead is changedSinceRead, for the tests of package cli_test.
var ChangedSinceRead = changedSinceRead
