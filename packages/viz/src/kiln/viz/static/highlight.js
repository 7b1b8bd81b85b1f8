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

  function escape(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function commentStarts(language, text) {
    if (language === "llvm" || language === "asm") return text.startsWith(";") || text.startsWith("//");
    if (language === "python") return text.startsWith("#");
    if (language === "ptx" || language === "c" || language === "wgsl" || language === "metal") {
      return text.startsWith("//") || text.startsWith("/*") || (text.startsWith("#") && language === "c");
    }
    return text.startsWith("//") || text.startsWith("/*");
  }

  function highlight(source, language) {
    const keywords = language === "llvm" ? LLVM_KEYWORDS : language === "python" ? PY_KEYWORDS : C_KEYWORDS;
    const types = language === "llvm" ? LLVM_TYPES : C_TYPES;
    let out = "";
    let last = 0;
    TOKEN.lastIndex = 0;
    let match;
    while ((match = TOKEN.exec(source)) !== null) {
      const [whole, comment, string, number, sigil, word, call] = match;
      out += escape(source.slice(last, match.index));
      last = match.index + whole.length;
      if (comment !== undefined) {
        if (commentStarts(language, comment)) out += `<span class="hl-com">${escape(comment)}</span>`;
        else { out += escape(comment[0]); last = match.index + 1; TOKEN.lastIndex = last; }
      } else if (string !== undefined) out += `<span class="hl-str">${escape(string)}</span>`;
      else if (number !== undefined) out += `<span class="hl-num">${escape(number)}</span>`;
      else if (sigil !== undefined) out += `<span class="hl-var">${escape(sigil)}</span>`;
      else if (word !== undefined) {
        const cls = keywords.has(word) ? "hl-kw" : types.has(word) ? "hl-ty" : call ? "hl-fn" : null;
        out += cls ? `<span class="${cls}">${escape(word)}</span>` : escape(word);
        if (call) out += escape(call);
      }
    }
    return out + escape(source.slice(last));
  }

  return { highlight, escape };
})();
