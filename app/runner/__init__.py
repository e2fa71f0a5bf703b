"""``toollens run``: agents under test over a suite, concurrently, each
finished trajectory stored at once; resumable and shardable."""
