"""The served pieces of one timeline in time order, laid out flat for lookups.

A timeline serves disjoint pieces of time, each by one chunk (interval, version); the chunk's visible segments
serve all of its pieces. A lookup hands out, for each visible segment serving the query, the parts of the query
it serves, in the order of the first instant each serves (then by segment id).

Layout: the pieces, sorted by start, are cut into blocks of at most ``2 * BLOCK`` pieces (a list of block
first starts is bisected to find a block). Each block also holds, laid flat, the lookup entries of its pieces
whose chunk serves that one piece only (``entries``, with ``offsets[k]`` the entries before piece ``k``), and
which of its pieces belong to chunks serving several pieces (``multi``). A query bisects its two ends and answers
the pieces between them with one list slice per block: one C-level copy instead of one Python loop iteration
per served piece. Pieces of chunks serving several pieces, and the pieces the query cuts, take the piece-by-piece
path.

Invariants:

- ``_firsts[b]`` is the start of block ``b``'s first piece; blocks are non-empty and their pieces disjoint and in
  start order across blocks (so starts are unique).
- A block whose ``offsets`` is ``None`` is stale; otherwise its derived lists (``offsets``, ``entries``,
  ``multi``) equal what :meth:`_Block.refresh` would build now, once the touched chunks are applied. Adding or
  removing a piece marks its block stale, and a chunk whose served pieces or visible segments changed is passed
  to :meth:`ServedPieces.touch` (or stored into ``touched``: O(1)); before the next query a touched chunk
  serving one piece has its entries replaced in its block in place (two bisections and a slice assignment),
  any other has its blocks marked stale. A stale block is rebuilt only when a query reads it (O(block) once
  for all the changes it collected).
- Results equal the piece-by-piece walk for any history and any query (tests/unit/timeline).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Generic, NamedTuple, Protocol, TypeVar

from coordinator.timeline.coverage import make_piece as _piece
from events.interval import Interval
from events.segment import SegmentId

BLOCK = 64  # a block is split past 2 * BLOCK pieces; rebuilding a stale one walks its pieces once


class LookupEntry(NamedTuple):
    """A visible segment and the parts of the queried interval it serves, in time order."""

    segment_id: SegmentId
    intervals: tuple[Interval, ...]


class ServingChunk(Protocol):
    """What the layout reads of a chunk: its served pieces and its visible segments' entries."""

    @property
    def served(self) -> tuple[Interval, ...]: ...

    def lookup_entries(self) -> list[LookupEntry]:
        """One entry per visible segment, by partition id, each with all the chunk's served pieces (cached)."""
        ...

    def visible_segment_ids(self) -> tuple[SegmentId, ...]: ...


C = TypeVar("C", bound=ServingChunk)


class _Block(Generic[C]):
    __slots__ = ("entries", "multi", "offsets", "pieces", "starts")

    def __init__(self, pieces: list[tuple[int, int, C, Interval]]) -> None:
        self.pieces = pieces
        self.starts = [p[0] for p in pieces]
        self.offsets: list[int] | None = None  # None: stale
        self.entries: list[LookupEntry] = []
        self.multi: list[int] | None = None  # prefix counts of pieces of several-piece chunks (None: there are none)

    def refresh(self) -> list[int]:
        """Rebuild the flat entries; returns ``offsets``."""
        offsets = [0]
        entries: list[LookupEntry] = []
        multi = [0]
        m = 0
        for _s, _e, chunk, _p in self.pieces:
            if len(chunk.served) == 1:
                entries += chunk.lookup_entries()
            else:
                m += 1
            offsets.append(len(entries))
            multi.append(m)
        self.entries = entries
        self.multi = multi if m else None
        self.offsets = offsets
        return offsets


def _cut(chunk: ServingChunk, piece: Interval, qs: int, qe: int) -> list[LookupEntry]:
    """The entries of a one-piece chunk whose piece the query cuts."""
    part = (_piece(max(piece.start, qs), min(piece.end, qe)),)
    return [LookupEntry(sid, part) for sid in chunk.visible_segment_ids()]


class ServedPieces(Generic[C]):
    """The disjoint served pieces of a timeline, by start, with the flat lookup layout described above."""

    __slots__ = ("_blocks", "_firsts", "touched")

    def __init__(self) -> None:
        self._blocks: list[_Block[C]] = []
        self._firsts: list[int] = []
        # Chunks whose served pieces or visible segments changed since the last query (``touch``; a hot caller may
        # store into the dict directly): their blocks are brought up to date before the next query.
        self.touched: dict[C, None] = {}

    def __iter__(self) -> Iterator[tuple[int, int, C, Interval]]:
        """The pieces (start, end, chunk serving it, piece) in time order."""
        for block in self._blocks:
            yield from block.pieces

    def __len__(self) -> int:
        return sum(len(b.pieces) for b in self._blocks)

    def touch(self, chunk: C) -> None:
        """``chunk``'s served pieces or visible segments changed: its blocks are stale (marked at the next query)."""
        self.touched[chunk] = None

    def add(self, start: int, end: int, chunk: C, piece: Interval) -> None:
        """File a piece (disjoint from every filed piece)."""
        blocks, firsts = self._blocks, self._firsts
        entry = (start, end, chunk, piece)
        if not blocks:
            blocks.append(_Block([entry]))
            firsts.append(start)
            return
        b = bisect_right(firsts, start) - 1
        if b < 0:
            b = 0
        block = blocks[b]
        i = bisect_left(block.starts, start)
        block.starts.insert(i, start)
        block.pieces.insert(i, entry)
        block.offsets = None
        firsts[b] = block.starts[0]
        if len(block.pieces) > 2 * BLOCK:
            half = len(block.pieces) // 2
            tail = _Block(block.pieces[half:])
            del block.pieces[half:]
            del block.starts[half:]
            blocks.insert(b + 1, tail)
            firsts.insert(b + 1, tail.starts[0])

    def remove(self, start: int, chunk: C) -> None:
        """Withdraw the filed piece starting at ``start`` (served by ``chunk``)."""
        b = bisect_right(self._firsts, start) - 1
        if b < 0:
            raise KeyError(start)
        block = self._blocks[b]
        i = bisect_left(block.starts, start)
        if i == len(block.starts) or block.starts[i] != start or block.pieces[i][2] is not chunk:
            raise KeyError(start)
        del block.starts[i]
        del block.pieces[i]
        block.offsets = None
        if not block.pieces:
            del self._blocks[b]
            del self._firsts[b]
        else:
            self._firsts[b] = block.starts[0]

    def settle(self) -> None:
        """Apply the touched chunks now, as the next query would (frees the set of touched chunks)."""
        if self.touched:
            self._mark_touched()

    def _mark_touched(self) -> None:
        """Bring the blocks of the touched chunks up to date: a one-piece chunk's entries are replaced in place in
        its block (a slice assignment, and the offsets after it shifted when their count changed); the blocks of
        any other touched chunk are marked stale."""
        touched = self.touched
        blocks, firsts = self._blocks, self._firsts
        for chunk in touched:
            served = chunk.served
            if len(served) != 1:
                for piece in served:
                    b = bisect_right(firsts, piece.start) - 1
                    if b >= 0:
                        blocks[b].offsets = None
                continue
            start = served[0].start
            b = bisect_right(firsts, start) - 1
            if b < 0:
                continue
            block = blocks[b]
            offsets = block.offsets
            if offsets is None:
                continue  # rebuilt when read
            k = bisect_left(block.starts, start)
            multi = block.multi
            if k == len(block.starts) or block.pieces[k][2] is not chunk or (
                    multi is not None and multi[k + 1] != multi[k]):  # it served several pieces: not laid flat yet
                block.offsets = None
                continue
            new = chunk.lookup_entries()
            lo, hi = offsets[k], offsets[k + 1]
            block.entries[lo:hi] = new
            shift = len(new) - (hi - lo)
            if shift:
                offsets[k + 1:] = [o + shift for o in offsets[k + 1:]]
        touched.clear()

    def _spans(self, qs: int, qe: int) -> list[tuple[_Block[C], int, int]]:
        """The blocks holding the pieces that overlap [qs, qe), each with its first and end piece index."""
        blocks, firsts = self._blocks, self._firsts
        spans: list[tuple[_Block[C], int, int]] = []
        if not blocks:
            return spans
        b = bisect_right(firsts, qs) - 1
        if b < 0:
            b = 0
        block = blocks[b]
        i = bisect_left(block.starts, qs)
        if i > 0 and block.pieces[i - 1][1] > qs:
            i -= 1  # the piece the query's start falls in
        while True:  # the pieces starting before qe
            starts = block.starts
            j = bisect_left(starts, qe, i)
            if j > i:
                spans.append((block, i, j))
            if j < len(starts):
                return spans
            b += 1
            if b == len(blocks):
                return spans
            block = blocks[b]
            i = 0

    def lookup_by_piece(self, qs: int, qe: int) -> list[LookupEntry]:
        """:meth:`lookup` walking every piece (the path taken before the flat layout; the reference of the tests)."""
        if self.touched:
            self._mark_touched()
        return self._walk(self._spans(qs, qe), qs, qe)

    def lookup(self, qs: int, qe: int) -> list[LookupEntry]:
        """The entries of the non-empty query [qs, qe) (see the module docstring for the order)."""
        if self.touched:
            self._mark_touched()
        spans = self._spans(qs, qe)
        if not spans:
            return []
        for block, i, j in spans:
            if block.offsets is None:
                block.refresh()
            multi = block.multi
            if multi is not None and multi[j] != multi[i]:
                return self._walk(spans, qs, qe)
        # No several-piece chunk among them: one-piece chunks answer with their entries, laid flat per block; only
        # the first and the last piece can be cut by the query.
        first_block, fi, fj = spans[0]
        last_block, _li, lj = spans[-1]
        start, end, chunk, piece = first_block.pieces[fi]
        head = start < qs or end > qe
        one = len(spans) == 1 and fj - fi == 1  # a single piece
        out = _cut(chunk, piece, qs, qe) if head else []
        if head and one:
            return out
        start, end, chunk, piece = last_block.pieces[lj - 1]
        tail = end > qe and not one
        last = len(spans) - 1
        for n, (block, i, j) in enumerate(spans):
            if n == 0 and head:
                i += 1
            if n == last and tail:
                j -= 1
            if j > i:
                offsets = block.offsets
                assert offsets is not None
                if out:
                    out += block.entries[offsets[i]:offsets[j]]
                else:  # the slice is a new list: the answer itself
                    out = block.entries[offsets[i]:offsets[j]]
        if tail:
            out += _cut(chunk, piece, qs, qe)
        return out

    @staticmethod
    def _walk(spans: list[tuple[_Block[C], int, int]], qs: int, qe: int) -> list[LookupEntry]:
        """Piece by piece: a chunk's visible segments serve the same parts, gathered per chunk (keyed by the chunk
        object) in the order of its first piece; None: all the chunk serves lies inside the query (its entries)."""
        parts: dict[C, list[Interval] | None] = {}
        for block, i, j in spans:
            for start, end, chunk, piece in block.pieces[i:j]:
                served = chunk.served
                if qs <= served[0].start and served[-1].end <= qe:
                    parts.setdefault(chunk)
                    continue
                ivs = parts.get(chunk)
                if ivs is None:
                    ivs = parts[chunk] = []
                sub = piece if qs <= start and end <= qe else _piece(max(start, qs), min(end, qe))
                if ivs and ivs[-1].end == sub.start:
                    ivs[-1] = _piece(ivs[-1].start, sub.end)
                else:
                    ivs.append(sub)
        out: list[LookupEntry] = []
        for chunk, ivs in parts.items():
            if ivs is None:
                out += chunk.lookup_entries()
            else:
                clipped = tuple(ivs)
                out += [LookupEntry(sid, clipped) for sid in chunk.visible_segment_ids()]
        return out

