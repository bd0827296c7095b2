/* dpbook: the search page's excerpts read like the pages they come from (loaded on search.html only, by
   book/_ext/page_fixes.py). Sphinx builds an excerpt from the text of the page's main block: that text includes the
   print-only table of contents, the code behind the page's closed toggles, and each formula as its TeX source. Here
   the print-only block and the toggled code are left out, a formula cut by the excerpt's edges is dropped, and the
   excerpt's formulas are typeset by the book's own MathJax. */
(() => {
  if (typeof Search === "undefined") return;
  const htmlToText = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const page = new DOMParser().parseFromString(htmlString, "text/html");
    page.querySelectorAll(".onlyprint, details.hide").forEach((el) => el.remove());
    return htmlToText(page.documentElement.outerHTML, anchor);
  };
  // the text before the first closing delimiter that has no opening one, and after an opening one left unclosed
  const wholeFormulas = (text) => {
    let start = 0;
    const close = text.search(/\\[)\]]/), open = text.search(/\\[(\[]/);
    if (close !== -1 && (open === -1 || close < open)) start = close + 2;
    let end = text.length;
    const lastOpen = Math.max(text.lastIndexOf("\\("), text.lastIndexOf("\\["));
    const lastClose = Math.max(text.lastIndexOf("\\)"), text.lastIndexOf("\\]"));
    if (lastOpen > lastClose) end = lastOpen;
    return (start > 0 ? "..." : "") + text.slice(start, end).trim() + (end < text.length ? "..." : "");
  };
  const makeSearchSummary = Search.makeSearchSummary;
  Search.makeSearchSummary = (htmlText, keywords, anchor) => {
    const summary = makeSearchSummary(htmlText, keywords, anchor);
    if (summary === null) return null;
    summary.textContent = wholeFormulas(summary.textContent);
    if (window.MathJax && MathJax.startup && MathJax.startup.promise)
      MathJax.startup.promise.then(() => MathJax.typesetPromise([summary]));
    return summary;
  };
})();
