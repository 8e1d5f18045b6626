package sharedstate

// AllowN decides and commits in one step, for a rule that is the only one on its request.
func (t *Table) AllowN(key []byte, now, n int64, p *Pending) error {
	if err := t.Decide(key, now, n, p); err != nil {
		return err
	}
	return t.Commit(p)
}

// Used returns how many slots of the current geometry hold or have held a key, out of
// max_keys, by reading every group's index.
func (t *Table) Used() uint32 {
	var n uint32
	for b := range t.cur.groups {
		gr, err := t.readGroup(t.cur, b, 1, 0)
		if err == nil {
			n += gr.used
		}
	}
	return n
}
