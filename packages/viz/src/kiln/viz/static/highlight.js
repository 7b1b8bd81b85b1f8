// Syntax highlighting of kernel sources: one tokenizing regular expression per language family, spans by class.
"use strict";
const KilnHighlight = (() => {
  const C_KEYWORDS = new Set(("if else for while do return break continue switch case default struct union " +
    "typedef static inline extern const volatile restrict __restrict__ __global__ __device__ __shared__ kernel " +
    "__kernel __global __local __constant __attribute__ __launch_bounds__ sizeof goto fn let var loop workgroup " +
    "storage uniform read_write device threadgroup thread using namespace template").split(" "));
  const C_TYPES = new Set(("void bool char short int long float double half unsigned signed size_t int8_t " +
    "int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t _Float16 __bf16 float2 float4 float8 half2 " +
    "half4 uchar ushort uint ulong i32 u32 f32 f16 vec2 vec4 array ptr atomic").split(" "));
  const LLVM_KEYWORDS = new Set(("define declare ret br label call load store getelementptr alloca phi icmp fcmp " +
    "select add sub mul fadd fsub fmul fdiv sdiv udiv srem urem shl lshr ashr and or xor zext sext trunc fptrunc " +
    "fpext fptosi fptoui sitofp uitofp bitcast inttoptr ptrtoint extractelement insertelement shufflevector " +
    "to nsw nuw inbounds align noalias nocapture readonly writeonly fast contract attributes target " +
    "datalayout triple unreachable switch").split(" "));
  const LLVM_TYPES = new Set("void i1 i8 i16 i32 i64 half bfloat float double ptr".split(" "));
  const PY_KEYWORDS = new Set(("def return if else elif for while in not and or is None True False import from " +
    "as lambda with pass break continue yield class").split(" "));
  const TOKEN = /(\/\/[^\n]*|\/\*[\s\S]*?\*\/|;[^\n]*|#[^\n]*)|("(?:[^"\\\n]|\\.)*")|(0x[0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?[fFuUlLh]*)|([%@$][\w.]+)|([A-Za-z_][\w.]*)(\s*\()?/g;

  // a piece of source as a DOM node: a text node, or a span of one highlight class holding a text node (the source
  // comes from a trace, so it is never parsed as markup)
  function piece(text, cls) {
    if (!cls) return document.createTextNode(text);
    const span = document.createElement("span");
    span.className = cls;
    span.textContent = text;
    return span;
  }

  function commentStarts(language, text) {
    if (language === "llvm" || language === "asm") return text.startsWith(";") || text.startsWith("//");
    if (language === "python") return text.startsWith("#");
    if (language === "ptx" || language === "c" || language === "wgsl" || language === "metal") {
      return text.startsWith("//") || text.startsWith("/*") || (text.startsWith("#") && language === "c");
    }
    return text.startsWith("//") || text.startsWith("/*");
  }

  // the highlighted source as a DocumentFragment of text nodes and classed spans
  function highlight(source, language) {
    const keywords = language === "llvm" ? LLVM_KEYWORDS : language === "python" ? PY_KEYWORDS : C_KEYWORDS;
    const types = language === "llvm" ? LLVM_TYPES : C_TYPES;
    const out = document.createDocumentFragment();
    const add = (text, cls) => { if (text) out.append(piece(text, cls)); };
    let last = 0;
    TOKEN.lastIndex = 0;
    let match;
    while ((match = TOKEN.exec(source)) !== null) {
      const [whole, comment, string, number, sigil, word, call] = match;
      add(source.slice(last, match.index));
      last = match.index + whole.length;
      if (comment !== undefined) {
        if (commentStarts(language, comment)) add(comment, "hl-com");
        else { add(comment[0]); last = match.index + 1; TOKEN.lastIndex = last; }
      } else if (string !== undefined) add(string, "hl-str");
      else if (number !== undefined) add(number, "hl-num");
      else if (sigil !== undefined) add(sigil, "hl-var");
      else if (word !== undefined) {
        add(word, keywords.has(word) ? "hl-kw" : types.has(word) ? "hl-ty" : call ? "hl-fn" : null);
        if (call) add(call);
      }
    }
    add(source.slice(last));
    return out;
  }

  return { highlight };
})();
