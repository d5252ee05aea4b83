package fastapi

import (
	"reflect"
	"testing"
)

// FuzzAckParseCache: validating a batch's acks in order with one
// ackParseCache never accepts an ack, nor gives it another partitionId,
// leaseId or group, that validating it alone would not: for arbitrary
// partitionId, leaseId and group texts, each ack either repeating the
// one before's (the cached case) or taking the next text, good or bad.
func FuzzAckParseCache(f *testing.F) {
	good, lease := "6d6c1f2e-0000-4000-8000-000000000001", "0190a000-0000-7000-8000-000000000001"
	f.Add(good, lease, "g", "not-a-uuid", "urn:uuid:"+lease, "g\x01", uint16(0b1011_0110_0101))
	f.Add(good, "", "", "{"+good+"}", "6d6c1f2e00004000800000000000000", "", uint16(0xffff))
	f.Add("", lease, "top", good+" ", lease, "\xff", uint16(0))
	f.Fuzz(func(t *testing.T, pid1, lease1, group1, pid2, lease2, group2 string, pattern uint16) {
		str := func(s string) *string { return &s }
		for _, top := range []string{"", "top"} {
			var c ackParseCache
			for i := range 16 {
				// Bit i picks each text's first or second form.
				pid, lse, grp := pid1, lease1, group1
				if pattern>>i&1 == 1 {
					pid, lse = pid2, lease2
				}
				if pattern>>((i+5)%16)&1 == 1 {
					grp = group2
				}
				it := ackBody{TransactionID: str("t"), PartitionID: str(pid), LeaseID: str(lse), ConsumerGroup: grp}
				got, gotMsg := toAckRequestWith(it, top, nil, &c)
				want, wantMsg := toAckRequest(it, top)
				if gotMsg != wantMsg || !reflect.DeepEqual(got, want) {
					t.Fatalf("top %q, ack %d (%q %q %q): %+v %q, alone %+v %q", top, i, pid, lse, grp, got, gotMsg, want, wantMsg)
				}
			}
		}
	})
}
