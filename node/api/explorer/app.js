// VeriLLM explorer: one page per thing, reached by hash routes (#/job/0x…, #/audit/3, #/node/0x…,
// #/batch/1, #/block/120, #/tx/0x…, #/jobs?status=…, #/audits?verdict=…), read from this node's JSON
// routes (/v1/verillm/explorer/...) and refreshed every 3 s without moving what the reader looks at.
// Plain ES modules: no build step, no library, no network beyond this node.
import { auditPage, jobPage } from "./job.js";
import { auditsPage, jobsPage, overview } from "./home.js";
import { batchPage, blockPage, nodePage, txPage } from "./entities.js";
import { $, api, el, getJson, nameOf, route, setNames, short, state } from "./util.js";

const REFRESH_MS = 3000;
const PAGES = { "": overview, jobs: jobsPage, audits: auditsPage, job: jobPage, audit: auditPage, node: nodePage, batch: batchPage, block: blockPage, tx: txPage };
let shown = { key: null, data: null };  // the route on screen and the JSON it was drawn from
let loading = 0;

function renderNetwork(net) {
  state.network = net;
  setNames(net.nodes);
  const serving = net.serving || { ready: true, reasons: [] };
  $("serving").hidden = serving.ready;
  $("serving").textContent = serving.ready ? "" : "this node cannot serve audited jobs: " + serving.reasons.join("; ");
  $("chain").replaceChildren(`chain ${net.chain_id} · `, el("a", { href: "#/block/" + net.head }, "block " + net.head),
    ` · model ${net.model.name} · Jobs ${short(net.addresses.Jobs)} · this node `, el("a", { href: "#/node/" + net.this_node }, nameOf(net.this_node)));
}

// Draw the page of the current route. A new route starts at its top (focus on its heading), or at the
// element its ?focus= names; a refresh of the same route redraws only when its data changed.
async function show() {
  const { path, query } = route();
  const page = PAGES[path[0] || ""];
  const key = location.hash;
  const ticket = ++loading;
  if (shown.key !== key) $("view").setAttribute("aria-busy", "true");  // a click shows at once that the page is loading (style.css)
  if (!page) return fail(`no page ${JSON.stringify(path[0])}: try a job hash, address or audit id in the search box`);
  let data;
  try {
    data = await page.load(path.slice(1), query);
  } catch (error) {
    if (ticket === loading) fail(error.status === 404 ? "not found: " + error.message : "cannot read this node's view: " + error.message, key);
    return;
  }
  if (ticket !== loading) return;  // the reader moved on meanwhile
  const text = JSON.stringify(data);
  const fresh = shown.key !== key;
  if (!fresh && text === shown.data) return $("view").removeAttribute("aria-busy");
  if (!fresh && document.activeElement && document.activeElement.closest("#filters")) return;  // do not redraw under the reader's typing
  shown = { key, data: text };
  const heading = el("h2", { id: "page-title", tabindex: "-1" }, page.title(path.slice(1), query));
  $("view").replaceChildren(heading, ...[page.draw(data, path.slice(1), query)].flat(2).filter(Boolean));
  $("view").dataset.page = path[0] || "overview";
  $("view").removeAttribute("aria-busy");
  $("view").dataset.ready = key;
  if (fresh) land(query);
}

function land(query) {
  const target = query.get("focus") && document.querySelector(`[data-focus="${CSS.escape(query.get("focus"))}"]`);
  document.querySelectorAll(".focused").forEach((n) => n.classList.remove("focused"));
  if (target) {
    target.classList.add("focused");
    target.scrollIntoView({ block: "center" });
  } else {
    window.scrollTo(0, 0);
    $("page-title").focus({ preventScroll: true });
  }
}

function fail(message, key = location.hash) {
  shown = { key, data: null };
  $("view").replaceChildren(el("h2", { id: "page-title", tabindex: "-1" }, "Nothing to show"), el("p", { class: "error", id: "page-error" }, message));
  $("view").removeAttribute("aria-busy");
  $("view").dataset.ready = key;
}

async function search(event) {
  event.preventDefault();
  const q = $("q").value.trim();
  $("search-results").replaceChildren();
  try {
    const body = await api("search?q=" + encodeURIComponent(q));
    if (body.matches.length === 1) {
      $("q").value = "";
      location.hash = body.matches[0].href;
    } else if (!body.matches.length) {
      $("search-results").replaceChildren(`nothing on this node matches ${q} (a job hash is known only to the node that dispatched it)`);
    } else {
      $("search-results").replaceChildren("several things match: ", ...body.matches.flatMap((m, i) => [i ? ", " : "", el("a", { href: m.href, "data-kind": m.kind }, `${m.kind} ${m.id}`)]));
    }
  } catch (error) {
    $("search-results").replaceChildren(error.message);
  }
}

async function refresh() {
  try {
    renderNetwork(await getJson("/v1/verillm/explorer/network"));
    $("error").hidden = true;
    await show();
    $("refreshed").textContent = "updated " + new Date().toLocaleTimeString(undefined, { hour12: false });
  } catch (error) {
    $("error").hidden = false;
    $("error").textContent = "cannot read this node's network view: " + error.message;
  }
}

// Old links (#job=0x…) still open the job.
if (/^#job=0x[0-9a-fA-F]{64}$/.test(location.hash)) location.replace("#/job/" + location.hash.slice(5));
$("search").addEventListener("submit", search);
window.addEventListener("hashchange", () => { $("search-results").replaceChildren(); show(); });
refresh();
setInterval(refresh, REFRESH_MS);
