// Streamlit's Markdown pipeline without React, for the sanitiser's tests.
//
// st.markdown renders with react-markdown: remark-parse, Streamlit's remark plugins (math, GFM,
// directives, its own rewrites of the tree's text, emoji), remark-rehype with raw HTML kept as
// `raw` nodes that react-markdown then shows as text (no rehype-raw unless unsafe_allow_html).
// This runs the same libraries in the same order; Streamlit's own rewrites are written here
// after what they do: `:material/` becomes `:material_` in the source, `:streamlit:` becomes the
// logo image, `:material_name:` an icon, directives become spans.
//
// Protocol: one JSON string of Markdown per line on stdin; one JSON line per input on stdout:
// {"html": the rendered HTML, "active": [what can load a URL, link, or is syntax the
// sanitiser must never let through: [kind, detail], ...]}.

import { createInterface } from "node:readline"

import { findAndReplace } from "mdast-util-find-and-replace"
import rehypeStringify from "rehype-stringify"
import remarkDirective from "remark-directive"
import remarkEmoji from "remark-emoji"
import remarkGfm from "remark-gfm"
import remarkMath from "remark-math"
import remarkParse from "remark-parse"
import remarkRehype from "remark-rehype"
import { unified } from "unified"
import { visit } from "unist-util-visit"

function streamlitLogo() {
  return (tree) => {
    findAndReplace(tree, [
      [/:streamlit:/g, () => ({ type: "image", url: "streamlit-logo.svg", alt: "Streamlit logo" })],
    ])
  }
}

function materialIcons() {
  return (tree) => {
    findAndReplace(tree, [
      [
        /:material_(\w+):/g,
        (_, name) => ({
          type: "emphasis",
          children: [{ type: "text", value: name }],
          data: { hName: "span", hProperties: { dataIcon: name } },
        }),
      ],
    ])
  }
}

function directivesAsSpans() {
  return (tree) => {
    visit(tree, "textDirective", (node) => {
      node.data = { hName: "span", hProperties: { dataDirective: node.name } }
    })
  }
}

const ACTIVE = new Set([
  "link",
  "linkReference",
  "image",
  "imageReference",
  "definition",
  "footnoteReference",
  "footnoteDefinition",
  "html",
  "heading",
  "inlineMath",
  "math",
  "textDirective",
  "leafDirective",
  "containerDirective",
])

// Records what the tree holds that loads, links, or should never come through the sanitiser:
// links, images, raw HTML, headings (Streamlit adds an anchor link), math, directives, icons,
// footnotes, task list items.
function inspect(found) {
  return () => (tree) => {
    visit(tree, (node) => {
      if (ACTIVE.has(node.type)) {
        found.push([node.type, node.url ?? node.value ?? node.name ?? ""])
      } else if (node.data?.hProperties?.dataIcon) {
        found.push(["icon", node.data.hProperties.dataIcon])
      } else if (node.type === "listItem" && typeof node.checked === "boolean") {
        found.push(["task list item", String(node.checked)])
      }
    })
  }
}

// react-markdown shows raw HTML as text when it is not allowed.
function rawAsText() {
  return (tree) => {
    visit(tree, "raw", (node) => {
      node.type = "text"
    })
  }
}

function render(markdown) {
  const found = []
  const source = markdown.replaceAll(":material/", ":material_")
  const html = unified()
    .use(remarkParse)
    .use(remarkMath)
    .use(remarkGfm)
    .use(remarkDirective)
    .use(streamlitLogo)
    .use(directivesAsSpans)
    .use(materialIcons)
    .use(remarkEmoji)
    .use(inspect(found))
    .use(remarkRehype, { allowDangerousHtml: true })
    .use(rawAsText)
    .use(rehypeStringify)
    .processSync(source)
    .toString()
  return { html, active: found }
}

const lines = createInterface({ input: process.stdin })
lines.on("line", (line) => {
  process.stdout.write(JSON.stringify(render(JSON.parse(line))) + "\n")
})
