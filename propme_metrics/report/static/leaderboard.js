/* leaderboard.html: sort a table by a column head, filter the corpora, columns and comparisons by corpus
   and setting. Reads only data-* attributes the page wrote; changes only classes and row order (no HTML is built). */
(function () {
  "use strict";
  function key(row, col, kind) {
    var v = row.cells[col].getAttribute("data-v");
    if (kind === "num") { return v === "" ? null : parseFloat(v); }
    return v;
  }

  function sortBy(table, th) {
    var col = parseInt(th.getAttribute("data-col"), 10);
    var kind = th.getAttribute("data-kind");
    var desc = th.classList.contains("asc");  // a second click reverses
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.classList.remove("asc", "desc"); });
    th.classList.add(desc ? "desc" : "asc");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a, col, kind), y = key(b, col, kind);
      if (x === null || y === null) { return x === y ? 0 : (x === null ? 1 : -1); }  // undefined and withheld last
      var c = kind === "num" ? x - y : String(x).localeCompare(String(y));
      return desc ? -c : c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }

  document.querySelectorAll("table.board").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.addEventListener("click", function () { sortBy(table, th); });
    });
  });

  var corpus = document.getElementById("corpus-filter");
  var setting = document.getElementById("setting-filter");

  function matches(el) {
    var c = el.getAttribute("data-corpus"), s = el.getAttribute("data-setting");
    return (!corpus.value || !c || c === corpus.value) && (!setting.value || !s || s === setting.value);
  }

  function filter() {
    document.querySelectorAll("[data-corpus], [data-setting]").forEach(function (el) {
      if (el.tagName !== "SELECT") { el.classList.toggle("off", !matches(el)); }
    });
  }

  corpus.addEventListener("change", filter);
  setting.addEventListener("change", filter);
})();
