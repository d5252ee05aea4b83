package projector

// Prepared is the item count of the batch prepared while another commits
// (0: none).
func (p *Projector) Prepared() int { return int(p.prepared.Load()) }
