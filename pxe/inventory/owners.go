package inventory

import "slices"

// owners are the records of each address (a MAC or an IP) in two maps: one
// for the addresses with a single owner, which is every address but while
// an edit passes through a conflict admission would refuse, and one for the
// rest. An address with one owner costs one map slot and no allocation.
type owners[K comparable] struct {
	one  map[K]*record
	many map[K][]*record
}

func newOwners[K comparable]() owners[K] {
	return owners[K]{one: map[K]*record{}, many: map[K][]*record{}}
}

// add makes r an owner of k, in place of another record of the same Machine.
func (o owners[K]) add(k K, r *record) {
	if rs, ok := o.many[k]; ok {
		if i := slices.IndexFunc(rs, func(x *record) bool { return x.key == r.key }); i >= 0 {
			rs[i] = r
		} else {
			o.many[k] = append(rs, r)
		}
		return
	}
	if cur, ok := o.one[k]; ok && cur.key != r.key {
		delete(o.one, k)
		o.many[k] = []*record{cur, r}
		return
	}
	o.one[k] = r
}

// remove drops r (that very record) as an owner of k.
func (o owners[K]) remove(k K, r *record) {
	if rs, ok := o.many[k]; ok {
		rs = slices.DeleteFunc(rs, func(x *record) bool { return x == r })
		switch len(rs) {
		case 0:
			delete(o.many, k)
		case 1:
			delete(o.many, k)
			o.one[k] = rs[0]
		default:
			o.many[k] = rs
		}
		return
	}
	if o.one[k] == r {
		delete(o.one, k)
	}
}

// of is k's owner when it has one, and the number of owners.
func (o owners[K]) of(k K) (*record, int) {
	if rs, ok := o.many[k]; ok {
		return nil, len(rs)
	}
	if r, ok := o.one[k]; ok {
		return r, 1
	}
	return nil, 0
}

// all are k's owners (a copy).
func (o owners[K]) all(k K) []*record {
	if rs, ok := o.many[k]; ok {
		return slices.Clone(rs)
	}
	if r, ok := o.one[k]; ok {
		return []*record{r}
	}
	return nil
}
