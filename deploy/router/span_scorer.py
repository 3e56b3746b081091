"""Span-aware replica scoring from vLLM-format KV events (issue 27, point 4).

Routers credit prefix chains: a block counts only if every block before
it in the request matched, so a document cached as a span on replica B
earns B nothing when it sits in the middle of a prompt. This scorer keeps
what each replica's KV events say it holds (server/KvEventPublisher.h:
BlockStored with parent and tokens, span blocks tagged "spanc:span" in
extra_keys, BlockRemoved, AllBlocksCleared) and scores a request's token
ids two ways:

- prefix blocks: the leading block-aligned blocks whose whole chain from
  the root the replica holds (what Dynamo's and vLLM's routers count);
- span blocks: full span blocks the replica holds whose tokens occur
  anywhere in the rest of the request, found by sliding over every offset
  (a span starts wherever its plus put it, not on a block boundary).

Two inverted indexes (block key -> replicas holding it) keep a request's
scoring at one lookup per offset, whatever the number of replicas.

A router that has spanc's own layout of the request (its block ids, as
`spanc compile --emit=plan` prints them and the events name them:
deploy/router/request_plan.py) scores it exactly instead, by block id:
reuse_plan and choose_plan (deploy/router/span_router.py does).
Standard library only: it reads decoded events (msgpack.unpackb of a
batch), so a real subscriber and bench/cluster/simulate.py feed it alike.
"""

SPAN_TAG = "spanc:span"


def content_key(tokens):
    """A block's identity by its tokens alone (where it sits aside)."""
    return hash(tuple(tokens))


def chain_key(parent_key, tokens):
    """A prefix block's identity by every token from the root to it."""
    return hash((parent_key, tuple(tokens)))


class ClusterIndex:
    """What every replica's KV events say it caches."""

    def __init__(self, num_replicas, block_size):
        self.block_size = block_size
        self.blocks = [dict() for _ in range(num_replicas)]  # hash -> key
        self.chains = [dict() for _ in range(num_replicas)]  # hash -> chain
        # Every block id held, partial blocks and unknown chains included.
        self.ids = [set() for _ in range(num_replicas)]
        self.holders = {}  # ("p"|"s", key) -> {replica: count}

    def _hold(self, replica, key, delta):
        holders = self.holders.setdefault(key, {})
        count = holders.get(replica, 0) + delta
        if count > 0:
            holders[replica] = count
        else:
            holders.pop(replica, None)
            if not holders:
                del self.holders[key]

    def clear(self, replica):
        for key in self.blocks[replica].values():
            self._hold(replica, key, -1)
        self.blocks[replica].clear()
        self.chains[replica].clear()
        self.ids[replica].clear()

    def apply(self, replica, event):
        """One decoded event of `replica`'s stream."""
        blocks, chains = self.blocks[replica], self.chains[replica]
        kind = event[0]
        if kind == "AllBlocksCleared":
            self.clear(replica)
        elif kind == "BlockRemoved":
            self.ids[replica].difference_update(event[1])
            for block in event[1]:
                key = blocks.pop(block, None)
                chains.pop(block, None)
                if key is not None:
                    self._hold(replica, key, -1)
        elif kind == "BlockStored":
            hashes, parent, tokens = event[1], event[2], event[3]
            self.ids[replica].update(hashes)
            span = len(event) > 8 and bool(event[8]) and \
                event[8][0] == [SPAN_TAG]
            chain = None if parent is None else chains.get(parent)
            size = self.block_size
            for index, block in enumerate(hashes):
                piece = tokens[index * size:(index + 1) * size]
                if len(piece) < size or block in blocks:
                    break  # partial blocks are never routed on
                if span:
                    key = ("s", content_key(piece))
                elif parent is not None and chain is None:
                    break  # a chain from a context no event named
                else:
                    chain = chain_key(chain, piece)
                    chains[block] = chain
                    key = ("p", chain)
                blocks[block] = key
                self._hold(replica, key, 1)

    def reuse(self, tokens, spans=True):
        """Prompt tokens each replica would reuse: {replica: tokens}."""
        size, reused = self.block_size, {}
        # Prefix chains: a replica keeps counting while it holds each next
        # block of the chain.
        chain, alive = None, None
        start = 0
        while start + size <= len(tokens):
            chain = chain_key(chain, tokens[start:start + size])
            holding = set(self.holders.get(("p", chain), ()))
            alive = holding if alive is None else alive & holding
            if not alive:
                break
            for replica in alive:
                reused[replica] = reused.get(replica, 0) + size
            start += size
        if not spans:
            return reused
        # Span blocks at any offset past the prefix; each window key once.
        seen = set()
        for offset in range(len(tokens) - size + 1):
            key = ("s", content_key(tokens[offset:offset + size]))
            holding = self.holders.get(key)
            if not holding or key in seen:
                continue
            seen.add(key)
            for replica in holding:
                reused[replica] = reused.get(replica, 0) + size
        return reused


    def reuse_plan(self, blocks, spans=True):
        """Prompt tokens each replica would reuse of a request laid out by
        spanc: `blocks` are (tokens, id, parent id) in prompt order, ids as
        the events name them. With spans, every block the replica holds,
        wherever it sits; without, the blocks from the first on while each
        chains from the one before (the prefix view: a span after the
        first breaks the chain)."""
        reused = {}
        for replica, held in enumerate(self.ids):
            total = 0
            if spans:
                total = sum(t for t, block, _ in blocks if block in held)
            elif blocks:
                expected = blocks[0][2]
                for tokens, block, parent in blocks:
                    if parent != expected or block not in held:
                        break
                    total += tokens
                    expected = block
            if total:
                reused[replica] = total
        return reused


def best(reused, loads, load_weight=1.0, allowed=None):
    """The replica (of `allowed`, default all) whose reused tokens minus
    its load, weighted, is largest; ties go to the least loaded, then the
    first."""
    candidates = range(len(loads)) if allowed is None else allowed
    return max(candidates,
               key=lambda r: (reused.get(r, 0) - load_weight * loads[r],
                              -loads[r], -r))


def choose(index, tokens, loads, spans=True, load_weight=1.0):
    """The replica whose reused tokens minus its load (prompt tokens
    queued on it, weighted) is largest; ties go to the least loaded."""
    return best(index.reuse(tokens, spans), loads, load_weight)


def choose_plan(index, blocks, loads, spans=True, load_weight=1.0):
    """choose() for a request laid out by spanc (reuse_plan)."""
    return best(index.reuse_plan(blocks, spans), loads, load_weight)
