"""A radix tree over token-id sequences: the sim-server's prefix cache.

Mirrors what SGLang's RadixAttention cache does at page size 1: after a
request, its prompt and output tokens are inserted; a new request's cached
prefix is the longest path of the tree it matches.  Edges hold tuples of
token ids and are split when a new sequence diverges inside one.  When the
tree holds more than ``capacity_tokens`` tokens, least recently used leaves
are evicted (down to 90 % of capacity, so eviction is amortised).

Statistics count tokens the way vLLM's ``prefix_cache_queries_total`` /
``prefix_cache_hits_total`` do (tokens queried, tokens found), plus
requests that hit at all.

Pure data structure: no I/O, imports nothing from agentrt.
"""

from __future__ import annotations

from collections.abc import Sequence


class _Node:
    __slots__ = ("children", "key", "last_access", "parent")

    def __init__(self, key: list[int], parent: _Node | None, tick: int) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[int, _Node] = {}
        self.last_access = tick


def _common_prefix(key: list[int], ids: list[int], start: int) -> int:
    """How many leading tokens of ``key`` equal ``ids[start:]``."""
    n = len(key)
    if ids[start : start + n] == key:
        return n
    limit = min(n, len(ids) - start)
    i = 0
    while i < limit and key[i] == ids[start + i]:
        i += 1
    return i


class RadixCache:
    """A prefix cache of token sequences with LRU eviction and hit counts."""

    def __init__(self, capacity_tokens: int = 1_000_000) -> None:
        if capacity_tokens < 1:
            raise ValueError(f"RadixCache capacity_tokens must be >= 1, got {capacity_tokens}")
        self.capacity_tokens = capacity_tokens
        self._root = _Node([], None, 0)
        self._tick = 0
        self.size_tokens = 0
        self.query_requests = 0
        self.hit_requests = 0
        self.query_tokens = 0
        self.hit_tokens = 0
        self.evicted_tokens = 0

    def match(self, ids: Sequence[int], *, record: bool = True) -> int:
        """The length of the longest cached prefix of ``ids``; touches the
        matched path (LRU) and, with ``record``, counts the query."""
        return self._walk(list(ids), insert=False, record=record)

    def insert(self, ids: Sequence[int]) -> None:
        """Cache ``ids`` (and so every prefix of it)."""
        self._walk(list(ids), insert=True, record=False)

    def match_insert(self, ids: Sequence[int]) -> int:
        """``match`` (recorded) then ``insert``, in one walk of the tree."""
        return self._walk(list(ids), insert=True, record=True)

    def _walk(self, ids: list[int], *, insert: bool, record: bool) -> int:
        self._tick += 1
        tick = self._tick
        node = self._root
        i = 0
        total = len(ids)
        matched = -1
        while i < total:
            child = node.children.get(ids[i])
            if child is None:
                if insert:
                    node.children[ids[i]] = _Node(ids[i:], node, tick)
                    self.size_tokens += total - i
                break
            n = _common_prefix(child.key, ids, i)
            child.last_access = tick
            if n < len(child.key):
                if not insert:
                    i += n
                    break
                matched = i + n
                # Split the edge: node -> mid (shared part) -> child (rest).
                mid = _Node(child.key[:n], node, tick)
                node.children[ids[i]] = mid
                child.key = child.key[n:]
                child.parent = mid
                mid.children[child.key[0]] = child
                child = mid
            i += n
            node = child
        hit = i if matched < 0 else matched
        if record:
            self.query_requests += 1
            self.query_tokens += total
            self.hit_tokens += hit
            if hit:
                self.hit_requests += 1
        if insert and self.size_tokens > self.capacity_tokens:
            self._evict(int(self.capacity_tokens * 0.9))
        return hit

    def _evict(self, target: int) -> None:
        while self.size_tokens > target:
            leaves = self._leaves()
            if not leaves:
                return
            leaves.sort(key=lambda n: n.last_access)
            for leaf in leaves:
                if self.size_tokens <= target:
                    return
                parent = leaf.parent
                if parent is None:
                    continue
                del parent.children[leaf.key[0]]
                self.size_tokens -= len(leaf.key)
                self.evicted_tokens += len(leaf.key)

    def _leaves(self) -> list[_Node]:
        out: list[_Node] = []
        stack = list(self._root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            else:
                out.append(node)
        return out

    def flush(self) -> None:
        """Drop every cached sequence (SGLang's ``/flush_cache``); keeps the
        statistics."""
        self._root = _Node([], None, self._tick)
        self.size_tokens = 0

    @property
    def hit_rate(self) -> float:
        """Cached tokens over queried tokens since start (0.0 before any query)."""
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0
