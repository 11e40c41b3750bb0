(function () {
  "use strict";
  var cache = {};
  var panel = document.getElementById("panel");
  var body = document.getElementById("panel-body");
  var active = null;
  function block(b) {
    if (!(b in cache)) {
      var el = document.getElementById("propme-data-" + b);
      cache[b] = el ? JSON.parse(el.textContent) : {};
    }
    return cache[b];
  }
  function node(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function fmt(x) { return (x === null || x === undefined) ? "-" : Number(x).toPrecision(3); }
  function show(m) {
    var gen = block(m.getAttribute("data-b"))[m.getAttribute("data-g")];
    if (!gen) { return; }
    var seg = gen.spans[Number(m.getAttribute("data-s"))];
    if (!seg) { return; }
    if (active) { active.classList.remove("active"); }
    active = m; m.classList.add("active");
    body.textContent = "";
    body.appendChild(node("h4", null, gen.title));
    body.appendChild(node("div", "lbl", (seg.label || "final span") + ", tokens " + seg.start + "-" + seg.end + " (" + (seg.end - seg.start) + " tokens)"));
    body.appendChild(node("blockquote", null, seg.text));
    var shown = seg.docs.length;
    body.appendChild(node("p", null, seg.n_docs ? seg.n_docs + " document(s)" + (shown < seg.n_docs ? "; the best " + shown + " shown (full_raw first, then by NV-recall)" : "")
      : "No document attached: documents are deduplicated per generation, so this span's sources may be listed under another span of the generation."));
    seg.docs.forEach(function (d) {
      var box = node("div", "doc");
      var head = node("div");
      head.appendChild(node("span", "src", d.source_id || "(no source id)"));
      head.appendChild(document.createTextNode(" "));
      var cls = d.match === "full_raw" ? "b full" : (d.match === "full_normalized" ? "b high" : "b");
      head.appendChild(node("span", cls, d.match));
      head.appendChild(node("span", "b", "NV-recall " + fmt(d.nv)));
      head.appendChild(node("span", "b dim", "shard " + d.shard + ", doc " + d.doc_ix));
      box.appendChild(head);
      var keys = Object.keys(d.metadata || {});
      if (keys.length) {
        var dl = node("dl");
        keys.forEach(function (k) {
          var v = d.metadata[k];
          dl.appendChild(node("dt", null, k));
          dl.appendChild(node("dd", null, typeof v === "string" ? v : JSON.stringify(v)));
        });
        box.appendChild(dl);
      }
      var pre = node("pre");
      var s = d.snippet || "", a = d.span[0], b = d.span[1];
      pre.appendChild(document.createTextNode((d.cut_left ? "\u2026" : "") + s.slice(0, a)));
      pre.appendChild(node("mark", null, s.slice(a, b)));
      pre.appendChild(document.createTextNode(s.slice(b) + (d.cut_right ? "\u2026" : "")));
      box.appendChild(pre);
      body.appendChild(box);
    });
    panel.hidden = false;
    panel.scrollTop = 0;
  }
  function close() {
    panel.hidden = true;
    if (active) { active.classList.remove("active"); active = null; }
  }
  document.addEventListener("click", function (e) {
    var m = e.target.closest ? e.target.closest(".seg[data-g]") : null;
    if (m) { show(m); }
  });
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape") { close(); return; }
    var m = document.activeElement;
    if ((e.key === "Enter" || e.key === " ") && m && m.matches && m.matches(".seg[data-g]")) {
      e.preventDefault(); show(m);
    }
  });
  document.getElementById("panel-close").addEventListener("click", close);
  function sources(el) {
    try { return JSON.parse(el.getAttribute("data-src") || "[]"); } catch (err) { return []; }
  }
  var filter = document.getElementById("source-filter");
  if (filter) {
    // generations with no document from the chosen source are hidden; spans from other sources dimmed
    filter.addEventListener("change", function () {
      var v = filter.value;
      document.querySelectorAll(".gen[data-src]").forEach(function (g) {
        g.classList.toggle("filtered-out", v !== "" && sources(g).indexOf(v) < 0);
      });
      document.querySelectorAll(".seg[data-src]").forEach(function (m) {
        m.classList.toggle("off", v !== "" && sources(m).indexOf(v) < 0);
      });
    });
  }
})();
