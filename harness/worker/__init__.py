"""The worker side: what a worker process does with a backend (calling it on a case, the decoy call before it) and the channel of frames it shares with the judge."""
