//go:build !linux

package mounttable

// Mounted cannot tell without Linux's statx: read the table.
func (t Table) Mounted(string) (mounted, known bool) { return false, false }

// At cannot tell without Linux's statmount: read the table.
func (t Table) At(string) (stack []Entry, known bool) { return nil, false }
