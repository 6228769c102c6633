"""The task lockbox: timeChunk and segment locks, APPEND/REPLACE, priorities and revocation,
segment allocation and publish validation, folded from its own decision log."""
