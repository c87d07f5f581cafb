// Live tail of the timeline: server-sent events, one per new ledger entry.
// Only on the last page (data-live="yes"); rows are built with textContent, never HTML.
(function () {
  const table = document.getElementById("timeline");
  if (!table || table.dataset.live !== "yes" || !window.EventSource) return;
  const q = new URLSearchParams({ after: table.dataset.tailFrom });
  if (table.dataset.step) q.set("step", table.dataset.step);
  if (table.dataset.agent) q.set("agent", table.dataset.agent);
  const wf = encodeURIComponent(table.dataset.workflow);
  const source = new EventSource("/w/" + wf + "/tail?" + q.toString());
  const body = table.tBodies[0];
  const firstQueued = () => body.querySelector("tr.queued");
  source.onmessage = function (ev) {
    const e = JSON.parse(ev.data);
    if (body.querySelector('tr[data-id="' + CSS.escape(e.id) + '"]')) return;
    const tr = document.createElement("tr");
    tr.className = "entry new";
    tr.dataset.id = e.id;
    const when = e.ts ? new Date(e.ts * 1000).toISOString().replace("T", " ").slice(0, 19) : "";
    for (const v of [e.id, when, e.turn_id, e.step_id, e.agent_id, e.thought, e.action, e.result, e.tokens]) {
      const td = document.createElement("td");
      td.textContent = typeof v === "string" || typeof v === "number" ? String(v) : JSON.stringify(v);
      tr.appendChild(td);
    }
    const tag = document.createElement("td");
    tag.innerHTML = '<span class="tag raw">raw</span>';
    tr.appendChild(tag);
    body.insertBefore(tr, firstQueued());
    const empty = document.getElementById("empty");
    if (empty) empty.remove();
  };
})();
