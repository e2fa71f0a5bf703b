"""The live OTLP receiver's engine (``POST /v1/traces``, the route, is ``app.web.otlp``).

Spans are grouped into trajectories by trace id and stored into a named run:
``?run=NAME`` or the ``X-ToolLens-Run`` header (default ``otlp``). The run
must exist (``POST /api/runs`` with the suite whose toolset the agent uses):
its toolset is what schema validity and hallucinated tools are judged by.

The spans of one trace may come in several export batches, so a trace is
buffered until its root span has arrived and nothing more came for
``settle`` seconds (or, without a root, for ``idle`` seconds); then it is
stored, many traces per transaction, by a background thread. While the
scoring worker process runs, a trace is scored there as soon as its root came
and stored once it settled, so that a burst's last traces do not wait for
``settle`` and then for scoring; a trace with a span that comes before then
is stored with it, scored again. A
request is answered once it is staged (its body committed to the
``otlp_batches`` table, under this server's lease) and its spans buffered; a
trajectory is stored in the transaction that marks its trace done there, and
the staged requests of a server that died (its lease expired) are taken over
by the next server, so an acknowledged span survives a crash. The buffer is bounded
before a request is acknowledged: past a trace's own bound (its spans, its tool calls)
the request is refused with 413, past the whole buffer's (spans, traces, bytes) or with
the database away with 503 and ``Retry-After``, which the OpenTelemetry exporters retry.
Spans arriving for a trace already stored (late, or a retried request) make another trial of it; spans stored already
are recognised by the database (``otlp_traces``) and not stored twice.
Shutting the app down stores everything still buffered. docs/otlp-receiver.md
says what is guaranteed.

The parts: ``intake`` (an export request read into spans, bounded: ``bounds``), ``buffer``
(span assembly, pure: traces grouped, bounded, and found ready by an injected clock),
``staging`` (staged requests and the lease), ``landing`` (storing, retrying, rejecting),
``scoring`` and ``worker`` (the second process that scores large chunks), and ``receiver``,
which puts them together.
"""
