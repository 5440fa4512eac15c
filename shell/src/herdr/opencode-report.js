// fleetd's report plugin for an opencode member (checked against opencode 1.18.33, Bun 1.3.14):
// it tells the member's gateway, through `fleetd member-report --agent opencode`, when a turn
// starts (the first `busy` after idle, with its prompt), ends (`session.idle`, with its prompt
// and last answer), fails or retries on a limit (`session.error`, a `retry` status), and when
// it waits on a person (`permission.asked`, `question.asked`). It imports nothing, never throws
// into opencode, and gives the reporter 10 s. fleetd writes the two paths below (JSON strings).
const REPORT_BIN = __REPORT_BIN__, SEQ_FILE = __SEQ_FILE__;
const LIMIT_RE = /\b429\b|rate[ _-]?limit|too many requests|too_many_requests|usage limit|limit reached|quota|resource[ _]exhausted|FreeUsageLimitError|GoUsageLimitError/i;
const timed = (p, ms) => Promise.race([p, new Promise((r) => setTimeout(r, ms))]);

// The only export, and a function: opencode calls every export of the module.
export const FleetReport = async ({ client }) => {
  const parentOf = new Map(), inTurn = new Set(), limitSent = new Set();
  let chain = Promise.resolve();
  const enqueue = (job) => { chain = chain.then(job).catch(() => {}); };

  const send = (report) => new Promise((resolve) => {
    try {
      const proc = Bun.spawn([REPORT_BIN, "member-report", "--agent", "opencode", "--seq", SEQ_FILE], {
        stdin: new TextEncoder().encode(JSON.stringify(report)), stdout: "ignore", stderr: "ignore",
      });
      const t = setTimeout(() => { try { proc.kill(); } catch {} }, 10000);
      proc.exited.catch(() => {}).finally(() => { clearTimeout(t); resolve(); });
    } catch { resolve(); }
  });

  const isChild = async (id) => {
    if (!id) return false;
    if (!parentOf.has(id)) {
      try {
        const r = await timed(client.session.get({ path: { id } }), 5000);
        if (!r?.data) return false;
        parentOf.set(id, r.data.parentID ?? null);
      } catch { return false; }
    }
    return Boolean(parentOf.get(id));
  };
  const recent = async (id, limit) => {
    try {
      const r = await timed(client.session.messages({ path: { id }, query: { limit } }), 5000);
      const list = Array.isArray(r?.data) ? r.data.slice() : [];
      return list.sort((a, b) => (a?.info?.time?.created ?? 0) - (b?.info?.time?.created ?? 0));
    } catch { return []; }
  };
  const textOf = (m) => (Array.isArray(m?.parts) ? m.parts : [])
    .filter((p) => p?.type === "text" && typeof p.text === "string" && !p.synthetic && !p.ignored)
    .map((p) => p.text).join("\n").trim();
  const lastPrompt = (list) => {
    for (let i = list.length - 1; i >= 0; i--) if (list[i]?.info?.role === "user" && textOf(list[i])) return i;
    return -1;
  };

  const onBusy = async (id) => {
    if (await isChild(id)) return;
    const list = await recent(id, 10), i = lastPrompt(list);
    await send({ kind: "busy", session: id, prompt: i < 0 ? null : textOf(list[i]) });
  };
  const onIdle = async (id) => {
    if (await isChild(id)) return;
    const list = await recent(id, 100), i = lastPrompt(list);
    let text = "";
    for (let j = list.length - 1; j > i && !text; j--) if (list[j]?.info?.role === "assistant") text = textOf(list[j]);
    await send({ kind: "idle", session: id, prompt: i < 0 ? null : textOf(list[i]), text });
  };
  const onError = async (id, error) => {
    if (await isChild(id)) return;
    const name = String(error?.name ?? "Error"), d = error?.data ?? {};
    const msg = typeof d.message === "string" ? d.message : "";
    const limit = d.statusCode === 429 || LIMIT_RE.test(msg) || (typeof d.responseBody === "string" && LIMIT_RE.test(d.responseBody));
    await send({ kind: "error", session: id ?? null, limit, words: msg ? `${name}: ${msg}` : name });
  };

  const route = (event) => {
    const p = event?.properties ?? {}, id = p.sessionID;
    switch (event?.type) {
      case "session.created": {
        const info = p.info ?? {};
        if (!info.id) return;
        parentOf.set(info.id, info.parentID ?? null);
        if (!info.parentID) enqueue(() => send({ kind: "ready", session: info.id }));
        return;
      }
      case "session.status": {
        const s = p.status ?? {};
        if (!id) return;
        if (s.type === "busy" && !inTurn.has(id)) { // "busy" repeats every step: first only
          inTurn.add(id); limitSent.delete(id); enqueue(() => onBusy(id));
        } else if (s.type === "retry") { // opencode retries limits itself; the turn goes on
          const words = String(s.action?.message ?? s.message ?? "");
          const limit = ["account_rate_limit", "free_tier_limit"].includes(s.action?.reason) || LIMIT_RE.test(words);
          if (limit && !limitSent.has(id)) {
            limitSent.add(id);
            enqueue(async () => { if (!(await isChild(id))) await send({ kind: "error", session: id, limit: true, words, retrying: true }); });
          }
        }
        return;
      }
      case "session.idle":
        if (!id) return;
        inTurn.delete(id); limitSent.delete(id); enqueue(() => onIdle(id));
        return;
      case "session.error":
        enqueue(() => onError(id, p.error));
        return;
      case "permission.asked": { // a subagent's request blocks the turn too
        const pats = Array.isArray(p.patterns) ? p.patterns.join(" ") : "";
        enqueue(() => send({ kind: "permission", session: id ?? null, words: `${p.permission ?? "permission"} ${pats}`.trim() }));
        return;
      }
      case "question.asked": {
        const q = Array.isArray(p.questions) ? p.questions[0] : undefined;
        enqueue(() => send({ kind: "permission", session: id ?? null, words: `question: ${q?.question ?? ""}`.trim() }));
        return;
      }
    }
  };
  // Called un-awaited for every bus event of the directory (deltas too): only enqueue here.
  return { event: async (input) => { try { route(input?.event); } catch {} } };
};
