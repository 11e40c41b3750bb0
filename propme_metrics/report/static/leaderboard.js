/* leaderboard.html: sort by a column head, filter columns and comparisons by corpus and setting.
   Reads only data-* attributes the page wrote; changes only classes and row order (no HTML is built). */
(function () {
  "use strict";
  var board = document.getElementById("board");
  var body = board.tBodies[0];
  var heads = board.tHead.rows[0].cells;

  function key(row, col, kind) {
    var v = row.cells[col].getAttribute("data-v");
    if (kind === "num") { return v === "" ? null : parseFloat(v); }
    return v;
  }

  function sortBy(th) {
    var col = parseInt(th.getAttribute("data-col"), 10);
    var kind = th.getAttribute("data-kind");
    var desc = th.classList.contains("asc");  // a second click reverses
    Array.prototype.forEach.call(heads, function (h) { h.classList.remove("asc", "desc"); });
    th.classList.add(desc ? "desc" : "asc");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a, col, kind), y = key(b, col, kind);
      if (x === null || y === null) { return x === y ? 0 : (x === null ? 1 : -1); }  // undefined last
      var c = kind === "num" ? x - y : String(x).localeCompare(String(y));
      return desc ? -c : c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }

  Array.prototype.forEach.call(heads, function (th) {
    th.addEventListener("click", function () { sortBy(th); });
  });

  var corpus = document.getElementById("corpus-filter");
  var setting = document.getElementById("setting-filter");

  function matches(el) {
    var c = el.getAttribute("data-corpus"), s = el.getAttribute("data-setting");
    return (!corpus.value || c === corpus.value) && (!setting.value || s === setting.value);
  }

  function filter() {
    document.querySelectorAll("#board [data-corpus], #compare tr[data-corpus]").forEach(function (el) {
      el.classList.toggle("off", !matches(el));
    });
  }

  corpus.addEventListener("change", filter);
  setting.addEventListener("change", filter);
})();
