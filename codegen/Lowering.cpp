//===- Lowering.cpp - Optimized span IR to the physical plan --------------===//

#include "codegen/Lowering.h"

#include "ir/Stack.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <algorithm>
#include <functional>

namespace spanc::codegen {

namespace {

using ir::Op;
using ir::OpKind;
using plan::Call;
using plan::CallId;
using plan::GenOptions;
using plan::Piece;
using plan::Plan;
using plan::PlanSegment;
using plan::QueryPlan;
using plan::ResultItem;
using plan::SegmentKind;
using plan::TokenId;

/// splitmix64: derives independent seeds for repeat samples.
uint64_t mixSeed(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

std::string formatLocation(const ir::Location &loc) {
  if (!loc.isKnown())
    return "";
  return (loc.file + ":" + llvm::Twine(loc.line) + ":" +
          llvm::Twine(loc.column))
      .str();
}

class PlanBuilder {
public:
  PlanBuilder(const MessageEncoder &encoder, ir::DiagnosticEngine &diagnostics,
              const LoweringLimits &limits)
      : encoder(encoder), diagnostics(diagnostics), limits(limits),
        assistantHeader(encoder.assistantHeader()),
        endOfTurn(encoder.endOfTurn()) {}

  bool lowerQuery(const ir::Query &query) {
    currentQuery = query.getName();
    queryCalls.clear();
    barrier.clear();
    QueryPlan queryPlan;
    queryPlan.name = query.getName().str();
    const Op *result = const_cast<ir::Query &>(query).getResult();
    if (!result) {
      diagnostics.error(query.getLoc(), "query has no span.yield");
      return false;
    }
    bool ok = collectResults(result, /*sampleKey=*/0, /*cacheOnly=*/false,
                             queryPlan.results);
    queryPlan.calls.assign(queryCalls.begin(), queryCalls.end());
    llvm::sort(queryPlan.calls);
    plan.queries.push_back(std::move(queryPlan));
    return ok;
  }

  Plan takePlan() { return std::move(plan); }

private:
  /// The query's result: call outputs and literal texts, in order.
  bool collectResults(const Op *op, uint64_t sampleKey, bool cacheOnly,
                      std::vector<ResultItem> &results) {
    switch (op->getKind()) {
    case OpKind::System:
    case OpKind::User:
    case OpKind::Assistant:
    case OpKind::Fragment:
      if (!cacheOnly)
        results.push_back({std::nullopt, op->getText().str()});
      return true;
    case OpKind::Gen:
    case OpKind::Chat: {
      std::optional<CallId> call = lowerCall(op, sampleKey, cacheOnly);
      if (!call)
        return false;
      if (!cacheOnly)
        results.push_back({*call, ""});
      return true;
    }
    case OpKind::Cross:
    case OpKind::Plus:
    case OpKind::Par: {
      bool ok = true;
      for (const Op *operand : op->operandValues())
        ok &= collectResults(operand, sampleKey, cacheOnly, results);
      return ok;
    }
    case OpKind::Seq: {
      // Later children run after earlier ones: their calls depend on every
      // call the earlier children made.
      size_t savedBarrier = barrier.size();
      bool ok = true;
      for (const Op *operand : op->operandValues()) {
        size_t before = plan.calls.size();
        ok &= collectResults(operand, sampleKey, cacheOnly, results);
        for (size_t id = before; id < plan.calls.size(); ++id)
          barrier.push_back(CallId(id));
      }
      barrier.resize(savedBarrier);
      return ok;
    }
    case OpKind::Repeat:
      return forEachSample(op, sampleKey, [&](const Op *body, uint64_t key) {
        return collectResults(body, key, cacheOnly, results);
      });
    case OpKind::Monad:
      return collectResults(op->getOperand(0), sampleKey, /*cacheOnly=*/true,
                            results);
    case OpKind::Retrieve:
      diagnostics.error(op->getLoc(),
                        "span.retrieve must be resolved before lowering "
                        "(run the desugar-retrieve pass)");
      return false;
    case OpKind::Yield:
      break;
    }
    diagnostics.error(op->getLoc(), "unexpected op in a query result");
    return false;
  }

  static uint64_t deriveSampleKey(uint64_t key, int64_t sample) {
    return mixSeed(key ^ mixSeed(uint64_t(sample) + 1));
  }

  /// Calls `lower(body, sampleKey)` for each of a span.repeat's n samples,
  /// each with its own derived key (so its gens get distinct seeds).
  template <typename LowerFn>
  bool forEachSample(const Op *repeat, uint64_t key, LowerFn lower) {
    bool ok = true;
    int64_t n = repeat->getIntAttr("n").value_or(1);
    // Checked before the first sample: n may be a billion.
    if (n > limits.maxCalls - samplesExpanded)
      return overLimit(repeat, "the program's repeats expand to more than " +
                                   llvm::Twine(limits.maxCalls) +
                                   " samples (this one to " + llvm::Twine(n) +
                                   ")");
    samplesExpanded += n;
    for (int64_t i = 0; i < n; ++i)
      ok &= lower(repeat->getOperand(0), deriveSampleKey(key, i));
    return ok;
  }

  /// A gen is deterministic when it samples greedily and so does every gen
  /// its input contains: its samples under a repeat are then one call.
  bool isDeterministic(const Op *op) {
    auto found = deterministic.find(op);
    if (found != deterministic.end())
      return found->second;
    bool result = true;
    if (op->getKind() == OpKind::Gen || op->getKind() == OpKind::Chat)
      result = op->getNumberAttr("temperature").value_or(0.0) == 0.0;
    for (const Op *operand : op->operandValues())
      result = result && isDeterministic(operand);
    deterministic[op] = result;
    return result;
  }

  std::optional<CallId> lowerCall(const Op *gen, uint64_t sampleKey,
                                  bool cacheOnly) {
    if (isDeterministic(gen))
      sampleKey = 0;
    auto key = std::make_pair(gen, sampleKey);
    auto found = calls.find(key);
    if (found != calls.end()) {
      Call &call = plan.calls[found->second];
      call.cacheOnly = call.cacheOnly && cacheOnly;
      noteQueryCall(found->second);
      return found->second;
    }

    // Lower the input first: dependencies get smaller ids (topological).
    Call call;
    llvm::SmallVector<Piece, 8> causal;
    bool sawPlus = false;
    bool ok = true;
    auto flushCausal = [&] {
      if (causal.empty())
        return;
      PlanSegment segment;
      segment.kind = sawPlus ? SegmentKind::Tail : SegmentKind::Prefix;
      segment.pieces = std::move(causal);
      causal.clear();
      call.segments.push_back(std::move(segment));
    };
    auto emitSpans = [&](const Op *plus, uint64_t key) {
      flushCausal();
      sawPlus = true;
      // Each summand is a span; a plus or repeat among the summands
      // contributes each of its own summands (samples) as a span, since
      // + is associative: +(a, +(b, c)) and +(a, repeat(2, g)) are flat.
      std::function<void(const Op *, uint64_t)> emitOne =
          [&](const Op *summand, uint64_t summandKey) {
            if (summand->getKind() == OpKind::Plus) {
              for (const Op *inner : summand->operandValues())
                emitOne(inner, summandKey);
              return;
            }
            if (summand->getKind() == OpKind::Repeat) {
              forEachSample(summand, summandKey,
                            [&](const Op *body, uint64_t key) {
                              emitOne(body, key);
                              return true;
                            });
              return;
            }
            PlanSegment span;
            span.kind = SegmentKind::Span;
            ok &= appendPieces(summand, summandKey, call, span.pieces);
            span.ownContext = isConversationOfCall(span.pieces);
            if (!span.pieces.empty())
              call.segments.push_back(std::move(span));
          };
      emitOne(plus, key);
    };
    // The top level of the input: a cross of items, where a plus (or a
    // repeat, which is one) opens spans.
    std::function<void(const Op *)> walkTop = [&](const Op *op) {
      switch (op->getKind()) {
      case OpKind::Cross:
      case OpKind::Seq:
      case OpKind::Par:
        for (const Op *operand : op->operandValues())
          walkTop(operand);
        return;
      case OpKind::Plus:
      case OpKind::Repeat:
        emitSpans(op, sampleKey);
        return;
      default:
        ok &= appendPieces(op, sampleKey, call, causal);
      }
    };
    if (gen->getKind() == OpKind::Chat) {
      for (const Op *message : gen->operandValues())
        walkTop(message);
    } else {
      walkTop(gen->getOperand(0));
    }
    if (!ok)
      return std::nullopt;
    if (call.segments.empty() && causal.empty()) {
      diagnostics.error(gen->getLoc(), "this gen's input has no tokens");
      return std::nullopt;
    }
    causal.push_back({assistantHeader, std::nullopt, {}, "assistant-header"});
    flushCausal();

    call.id = CallId(plan.calls.size());
    call.query = currentQuery.str();
    call.options = readOptions(gen, sampleKey);
    if (!gen->hasAttr("max_tokens") && limits.defaultMaxTokens > 0)
      call.options.maxTokens = defaultMaxTokens(call);
    call.cacheOnly = cacheOnly;
    call.location = formatLocation(gen->getLoc());
    for (CallId dependency : barrier)
      if (llvm::find(call.dependencies, dependency) == call.dependencies.end())
        call.dependencies.push_back(dependency);
    llvm::sort(call.dependencies);
    if (!fitsContext(gen, call))
      return std::nullopt;
    if (int64_t(plan.calls.size()) >= limits.maxCalls) {
      overLimit(gen, "the program makes more than " +
                         llvm::Twine(limits.maxCalls) + " model calls");
      return std::nullopt;
    }
    calls[key] = call.id;
    noteQueryCall(call.id);
    plan.calls.push_back(std::move(call));
    return plan.calls.back().id;
  }

  /// Whether `pieces` are a whole conversation of an inner call: its input
  /// (every piece of its segments; the last is its assistant header), then
  /// its output (plus-distribute's x ⋈ G(x)). Such a span attends to
  /// nothing outside itself, as that call did, so it finds the blocks the
  /// call left in the cache.
  bool isConversationOfCall(llvm::ArrayRef<Piece> pieces) const {
    if (pieces.size() < 2 || !pieces.back().call)
      return false;
    const Call &inner = plan.calls[*pieces.back().call];
    llvm::SmallVector<const Piece *, 8> input;
    for (const PlanSegment &segment : inner.segments) {
      if (segment.kind == SegmentKind::Span)
        return false; // not one causal chain
      for (const Piece &piece : segment.pieces)
        input.push_back(&piece);
    }
    if (input.size() != pieces.size())
      return false;
    for (size_t i = 0; i + 1 < pieces.size(); ++i)
      if (input[i]->tokens != pieces[i].tokens ||
          input[i]->call != pieces[i].call ||
          input[i]->trailer != pieces[i].trailer)
        return false;
    return input.back()->tokens == pieces.back().tokens;
  }

  /// Appends the tokens of `op` as causal pieces (inside a span, or in a
  /// prefix or tail): nested joins concatenate in order.
  bool appendPieces(const Op *op, uint64_t sampleKey, Call &call,
                    llvm::SmallVectorImpl<Piece> &pieces) {
    switch (op->getKind()) {
    case OpKind::System:
      return appendMessage(op, MessageRole::System, "system", pieces);
    case OpKind::User:
      return appendMessage(op, MessageRole::User, "user", pieces);
    case OpKind::Assistant:
      return appendMessage(op, MessageRole::Assistant, "assistant", pieces);
    case OpKind::Fragment:
      pieces.push_back({encoder.encodeFragment(op->getText()),
                        std::nullopt,
                        {},
                        "fragment"});
      return true;
    case OpKind::Cross:
    case OpKind::Plus:
    case OpKind::Seq:
    case OpKind::Par: {
      bool ok = true;
      for (const Op *operand : op->operandValues())
        ok &= appendPieces(operand, sampleKey, call, pieces);
      return ok;
    }
    case OpKind::Repeat:
      return forEachSample(op, sampleKey, [&](const Op *body, uint64_t key) {
        return appendPieces(body, key, call, pieces);
      });
    case OpKind::Gen:
    case OpKind::Chat: {
      std::optional<CallId> inner = lowerCall(op, sampleKey, false);
      if (!inner)
        return false;
      addDependency(call, *inner);
      pieces.push_back({assistantHeader, *inner, endOfTurn, "output"});
      return true;
    }
    case OpKind::Monad: {
      // Run for cache effect before this call; contributes no tokens.
      std::vector<ResultItem> ignored;
      size_t before = plan.calls.size();
      bool ok = collectResults(op->getOperand(0), sampleKey,
                               /*cacheOnly=*/true, ignored);
      for (size_t id = before; id < plan.calls.size(); ++id)
        addDependency(call, CallId(id));
      return ok;
    }
    case OpKind::Retrieve:
      diagnostics.error(op->getLoc(),
                        "span.retrieve must be resolved before lowering "
                        "(run the desugar-retrieve pass)");
      return false;
    case OpKind::Yield:
      break;
    }
    diagnostics.error(op->getLoc(), "unexpected op in a gen's input");
    return false;
  }

  bool appendMessage(const Op *op, MessageRole role, const char *label,
                     llvm::SmallVectorImpl<Piece> &pieces) {
    llvm::Expected<std::vector<TokenId>> tokens =
        encoder.encodeMessage(role, op->getText());
    if (!tokens) {
      diagnostics.error(op->getLoc(), llvm::toString(tokens.takeError()));
      return false;
    }
    pieces.push_back({std::move(*tokens), std::nullopt, {}, label});
    return true;
  }

  /// Reports that `op` takes the plan past a limit (once: what follows is
  /// not lowered) and returns false.
  bool overLimit(const Op *op, const llvm::Twine &what) {
    if (!limitReported)
      diagnostics.error(op->getLoc(), what + "; spanc allows at most " +
                                          llvm::Twine(limits.maxCalls) +
                                          " (--max-calls N raises the limit)");
    limitReported = true;
    return false;
  }

  /// Whether `call`'s prompt, as far as it is known, and its max_tokens fit
  /// the model's context; reports at `gen` when not.
  bool fitsContext(const Op *gen, const Call &call) {
    if (limits.contextLength <= 0)
      return true;
    uint64_t prompt = plan::knownPromptTokens(call);
    if (prompt + uint64_t(call.options.maxTokens) <=
        uint64_t(limits.contextLength))
      return true;
    // Outputs spliced in count as their frame only until they exist.
    bool splicesOutputs = llvm::any_of(call.segments, [](const auto &segment) {
      return llvm::any_of(segment.pieces,
                          [](const Piece &piece) { return bool(piece.call); });
    });
    diagnostics.error(
        gen->getLoc(),
        "this call's prompt has " +
            llvm::Twine(splicesOutputs ? "at least " : "") +
            llvm::Twine(prompt) + " tokens; with max_tokens " +
            llvm::Twine(call.options.maxTokens) +
            " it exceeds the model's context of " +
            llvm::Twine(limits.contextLength) + " tokens" +
            (prompt < uint64_t(limits.contextLength)
                 ? " (lower max_tokens to " +
                       llvm::Twine(uint64_t(limits.contextLength) - prompt) +
                       " or less, or shorten the prompt)"
                 : " (shorten the prompt)"));
    return false;
  }

  /// limits.defaultMaxTokens, lowered so that `call` fits the context
  /// whatever its inner calls answer (at least 1: a call that cannot fit
  /// is reported by fitsContext or when it is admitted).
  int64_t defaultMaxTokens(const Call &call) const {
    if (limits.contextLength <= 0)
      return limits.defaultMaxTokens;
    uint64_t prompt = plan::knownPromptTokens(call);
    for (const PlanSegment &segment : call.segments)
      for (const Piece &piece : segment.pieces)
        if (piece.call)
          prompt += uint64_t(plan.calls[*piece.call].options.maxTokens);
    int64_t room = limits.contextLength > int64_t(prompt)
                       ? limits.contextLength - int64_t(prompt)
                       : 1;
    return std::min(limits.defaultMaxTokens, room);
  }

  static void addDependency(Call &call, CallId dependency) {
    if (llvm::find(call.dependencies, dependency) == call.dependencies.end())
      call.dependencies.push_back(dependency);
  }

  GenOptions readOptions(const Op *gen, uint64_t sampleKey) const {
    GenOptions options;
    if (auto value = gen->getIntAttr("max_tokens"))
      options.maxTokens = *value;
    if (auto value = gen->getNumberAttr("temperature"))
      options.temperature = *value;
    if (auto value = gen->getNumberAttr("top_p"))
      options.topP = *value;
    if (auto value = gen->getIntAttr("top_k"))
      options.topK = *value;
    uint64_t seed = 0;
    if (auto value = gen->getIntAttr("seed"))
      seed = uint64_t(*value);
    options.seed = sampleKey ? mixSeed(seed ^ sampleKey) : seed;
    if (auto value = gen->getStringAttr("stop"))
      options.stop.push_back(value->str());
    if (auto value = gen->getStringAttr("model"))
      options.model = value->str();
    return options;
  }

  void noteQueryCall(CallId id) {
    // A shared call's dependencies belong to this query too.
    if (!queryCalls.insert(id).second)
      return;
    for (CallId dependency : plan.calls.size() > id
                                 ? plan.calls[id].dependencies
                                 : llvm::SmallVector<CallId, 4>())
      noteQueryCall(dependency);
  }

  const MessageEncoder &encoder;
  ir::DiagnosticEngine &diagnostics;
  const LoweringLimits &limits;
  /// Repeat samples expanded so far, against limits.maxCalls.
  int64_t samplesExpanded = 0;
  bool limitReported = false;
  std::vector<plan::TokenId> assistantHeader;
  std::vector<plan::TokenId> endOfTurn;
  Plan plan;
  llvm::DenseMap<std::pair<const Op *, uint64_t>, CallId> calls;
  llvm::DenseMap<const Op *, bool> deterministic;
  llvm::StringRef currentQuery;
  llvm::DenseSet<CallId> queryCalls;
  llvm::SmallVector<CallId, 8> barrier;
};

} // namespace

std::optional<plan::Plan> lowerToPlan(const ir::Module &module,
                                      const MessageEncoder &encoder,
                                      ir::DiagnosticEngine &diagnostics,
                                      const LoweringLimits &limits) {
  PlanBuilder builder(encoder, diagnostics, limits);
  bool ok = true;
  unsigned errorsBefore = diagnostics.getNumErrors();
  // Lowering recurses once per nested call (ir/Stack.h).
  ir::runOnWalkStack([&] {
    for (const auto &query : module.getQueries())
      ok &= builder.lowerQuery(*query);
  });
  // Whatever reported an error fails the plan, also where a walk goes on
  // past it (a span's summands).
  if (!ok || diagnostics.getNumErrors() != errorsBefore)
    return std::nullopt;
  return builder.takePlan();
}

} // namespace spanc::codegen
