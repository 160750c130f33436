// Deterministic tokenizer test corpus (no network): seeded generators for English prose, the
// repository's own source code, CJK, Thai, Devanagari, Arabic, decomposed accents, emoji
// sequences, digit runs, contractions in every case, whitespace runs, special tokens inside
// text, invalid UTF-8 and random code points. makeCorpus() returns [{name, bytes}] sections;
// corpusBytes() joins them. Same seed, same repository files → same bytes.
import fs from 'node:fs';
import path from 'node:path';

export function rngFrom(seed) {
  // mulberry32
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n) => Math.floor(next() * n);
  return {
    next,
    int,
    pick: (arr) => arr[int(arr.length)],
    chance: (p) => next() < p,
    range: (lo, hi) => lo + int(hi - lo + 1),
  };
}

const WORDS = `the of and to in is was that for it with as his on be at by had not are but from or
have an they which one you were her all she there would their we him been has when who will more
no if out so said what up its about into than them can only other new some could time these two
may then do first any my now such like our over man me even most made after also did many before
must through back years where much your way well down should because each just those people how
too little state good very make world still own see men work long get here between both life
being under never day same another know while last might us great old year off come since against
go came right used take three states himself few house use during without again place american
around however home small found thought went say part once general high upon school every does
government united left number course war until always away something fact though water less public
put think almost hand enough far took head yet system better set told nothing night end why
called didn eyes find going look asked later knew point next program city business give group
toward young days let room president side social given present several order national possible
rather second face per among form important often things looked early white case john become large
big need four within felt along children saw best church ever least power development light
tokenizer merge vocabulary byte encoding inference model weights attention expert router
kernel tensor matrix gradient sampling temperature context window prompt completion`.split(/\s+/);

const CONTRACTED = ["don't", "it's", "we'll", "they're", "I've", "I'm", "he'd", "can't", "won't",
  "she's", "you'd", "we've", "that'll", "IT'S", "WE'LL", "THEY'RE", "I'VE", "I'M", "HE'D",
  "We'Re", "You'Ll", "It'S", "They'rE", "wouldn't", "Bob's", "JAMES'S", "o'clock", "rock'n'roll"];

const HANZI = `的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着
事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公
从知全部问很最重新意情点理明实现正外通把度电力等高性程物少间长解世体数样信关应接开结果论表程序计算机语言模
型数据训练推理中文字符编码词汇测试句子标点世界你好谢谢朋友今天明天天气非常北京上海城市历史文化科学技术`.replace(/\s/g, '');
const HIRAGANA = 'あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんがぎぐげござじずぜぞだでどばびぶべぼぱぴぷぺぽゃゅょっ';
const KATAKANA = 'アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲンガギグゲゴザジズゼゾダデドバビブベボパピプペポャュョッー';
const KANJI = '日本語東京大学先生学生時間電車会社仕事料理写真音楽映画自動翻訳機械学習';
const THAI_CONS = 'กขคงจฉชซญดตถทธนบปผพฟภมยรลวศษสหอฮ';
const THAI_VOWEL = ['\u0e30', '\u0e31', '\u0e32', '\u0e34', '\u0e35', '\u0e36', '\u0e37', '\u0e38', '\u0e39', '\u0e40', '\u0e41', '\u0e42', '\u0e33'];
const THAI_TONE = ['\u0e48', '\u0e49', '\u0e4a', '\u0e4b', '\u0e47', '\u0e4c'];
const HINDI = `नमस्ते भारत हिन्दी भाषा दुनिया किताब विद्यालय प्रधानमंत्री संविधान क़ानून ज़िंदगी फ़िल्म
अंग्रेज़ी कंप्यूटर विज्ञान अनुसंधान स्वतंत्रता धन्यवाद कृपया मित्र परिवार समाचार`.split(/\s+/);
const ARABIC = `السلام عليكم العربية مرحبا بالعالم كتاب مدرسة جامعة الحاسوب تعلم الآلة اللغة مُحَمَّد
كِتَابٌ عَرَبِيٌّ الْقُرْآن بِسْمِ اللَّهِ`.split(/\s+/);
const EMOJI = ['😀', '🚀', '❤️', '👍🏽', '👩\u200d💻', '👨\u200d👩\u200d👧\u200d👦', '🏳️\u200d🌈', '🇯🇵',
  '🇺🇸', '1️⃣', '#️⃣', '👋🏿', '🧑🏻\u200d🔬', '✌🏼', '🤷\u200d♀️', '☕', '⭐️', '🐍', '💡', '🎉'];
const SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>', '<think>', '</think>', '<tool_call>',
  '</tool_call>', '<|fim_prefix|>', '<|fim_middle|>', '<|fim_suffix|>', '<|vision_start|>',
  '<|image_pad|>', '<|vision_end|>', '<tool_response>', '</tool_response>', '<|file_sep|>'];
const NEAR_SPECIALS = ['<|im_start', '<|im_end|', '<think', '< think>', '<|endoftext', '|>', '<|',
  '<<|im_end|>>', '<think></think>', '<|IM_START|>'];
// Decomposed Latin: base + combining marks (NFC composes most; some stay decomposed).
const MARKS = ['\u0300', '\u0301', '\u0302', '\u0303', '\u0308', '\u030a', '\u0327', '\u0323',
  '\u0331', '\u0307', '\u030c', '\u0328'];
// Characters where the NFC of the tokenizers crate (Unicode 9 tables) and of newer Unicode
// differ, singletons, Hangul jamo, and marks that compose with ASCII punctuation.
const NFC_EDGES = ['a\u1df6\u0301', 'e\u0c3c\u0316', '\u{11935}\u{11930}', 'A\u030a', '\u212b',
  '\u2126', '\uf900', '\u1100\u1161\u11a8', '\uac00\u11a8', '=\u0338', '<\u0338', '>\u0338',
  'q\u0307\u0323', 'a\u0323\u0301', 'a\u0301\u0323', '\u0301', ' \u0301', '1\u0301', 'x\u0345',
  '\u0f73', '\u0344', 'ﬁ', 'Ａ\u0301', 'i\u0307\u0301', 'ſ\u0307'];

function english(r, size) {
  let out = '';
  while (out.length < size) {
    let para = [];
    const nSent = r.range(2, 7);
    for (let s = 0; s < nSent; s++) {
      const n = r.range(4, 18);
      const words = [];
      for (let i = 0; i < n; i++) {
        let w = r.chance(0.06) ? r.pick(CONTRACTED) : r.pick(WORDS);
        if (r.chance(0.03)) w = w.toUpperCase();
        if (r.chance(0.05)) w = String(r.int(r.chance(0.5) ? 100 : 100000));
        if (r.chance(0.04)) w = '"' + w + '"';
        if (r.chance(0.03)) w = '(' + w + ')';
        if (r.chance(0.05)) w += ',';
        words.push(w);
      }
      let sent = words.join(' ');
      sent = sent[0].toUpperCase() + sent.slice(1) + r.pick(['.', '.', '.', '!', '?', '...', ';', ' --']);
      para.push(sent);
    }
    const eol = r.chance(0.2) ? '\r\n' : '\n';
    const trailing = r.chance(0.15) ? ' '.repeat(r.range(1, 3)) : '';
    out += para.join(' ') + trailing + eol + (r.chance(0.7) ? eol : '');
    if (r.chance(0.1)) out += '\t' + r.pick(WORDS) + ':\t' + r.int(1000) + '\n';
  }
  return out;
}

function sourceCode(r, size, root) {
  const files = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(h|cpp|cu|mjs|sh|md|json)$/.test(e.name)) files.push(p);
    }
  };
  for (const d of ['src', 'scripts', 'docs']) if (fs.existsSync(path.join(root, d))) walk(path.join(root, d));
  let out = '';
  // Deterministic choice of files; each contributes its head.
  const order = files.map((f, i) => [r.next(), f]).sort((a, b) => a[0] - b[0]).map((x) => x[1]);
  for (const f of order) {
    if (out.length >= size) break;
    const text = fs.readFileSync(f, 'utf8');
    out += `// ===== ${path.relative(root, f)} =====\n` + text.slice(0, 12000) + '\n';
  }
  // Python-like code with deep indentation and tabs.
  for (let i = 0; i < 200; i++) {
    const ind = ' '.repeat(4 * r.range(0, 5));
    out += `${ind}def f_${i}(x, y=${r.int(100)}):\n${ind}    return x**2 + y  # it's fine\n\n`;
    out += `\t\tif (a_${i} != b) { return ${r.int(9999)}; }\r\n`;
  }
  return out;
}

function cjk(r, size) {
  let out = '';
  while (out.length < size) {
    const k = r.int(5);
    if (k === 0) {
      let s = '';
      for (let i = r.range(5, 40); i > 0; i--) s += r.pick([...HANZI]);
      out += s + r.pick(['，', '。', '！', '？', '、', '；', '：']) + (r.chance(0.3) ? '「' + r.pick([...HANZI]) + '」' : '');
    } else if (k === 1) {
      let s = '';
      for (let i = r.range(3, 20); i > 0; i--) s += r.pick([...(r.chance(0.5) ? HIRAGANA : r.chance(0.5) ? KATAKANA : KANJI)]);
      out += s + '。';
    } else if (k === 2) {
      // Korean: precomposed syllables, and sometimes conjoining jamo that NFC composes.
      let s = '';
      for (let i = r.range(2, 6); i > 0; i--) {
        const L = r.int(19), V = r.int(21), T = r.int(28);
        if (r.chance(0.15)) s += String.fromCodePoint(0x1100 + L, 0x1161 + V) + (T ? String.fromCodePoint(0x11a7 + T) : '');
        else s += String.fromCodePoint(0xac00 + (L * 21 + V) * 28 + T);
      }
      out += s + ' ';
    } else if (k === 3) {
      out += 'ＡＢＣ１２３（全角）\u3000' + r.pick(['東京', 'テスト', '한국어']) + '\u3000';
    } else {
      out += r.pick(['Hello 世界', 'GPU显存', 'Qwen3.5模型', 'C++20标准', '第3章', '2024年1月1日']) + ' ';
    }
    if (r.chance(0.1)) out += '\n';
  }
  return out;
}

function thai(r, size) {
  let out = '';
  while (out.length < size) {
    let w = '';
    for (let i = r.range(1, 4); i > 0; i--) {
      w += r.pick([...THAI_CONS]);
      if (r.chance(0.6)) w += r.pick(THAI_VOWEL);
      if (r.chance(0.3)) w += r.pick(THAI_TONE);
    }
    out += w + (r.chance(0.3) ? ' ' : '') + (r.chance(0.05) ? '๑๒๓ ' : '') + (r.chance(0.05) ? '\n' : '');
  }
  return out;
}

function devanagari(r, size) {
  let out = '';
  while (out.length < size) {
    out += r.pick(HINDI) + (r.chance(0.1) ? '।' : '') + (r.chance(0.05) ? ' १२३४' : '') + (r.chance(0.05) ? '\n' : ' ');
    if (r.chance(0.05)) out += 'क\u093c' + '\u0915\u094d\u0937 ';
  }
  return out;
}

function arabic(r, size) {
  let out = '';
  while (out.length < size) {
    out += r.pick(ARABIC) + (r.chance(0.1) ? '، ' : ' ') + (r.chance(0.05) ? '٣٤٥ ' : '') + (r.chance(0.03) ? '\u200f' : '');
    if (r.chance(0.05)) out += '\n';
  }
  return out;
}

function accents(r, size) {
  let out = '';
  const bases = 'aeiouyAEIOUncsgzqx';
  while (out.length < size) {
    let w = '';
    for (let i = r.range(2, 8); i > 0; i--) {
      w += bases[r.int(bases.length)];
      if (r.chance(0.4)) w += r.pick(MARKS);
      if (r.chance(0.1)) w += r.pick(MARKS);
    }
    out += w + ' ';
    if (r.chance(0.15)) out += r.pick(NFC_EDGES) + r.pick([' ', '', 'x', '.']);
    if (r.chance(0.05)) out += r.pick(['café', 'naïve', 'Ångström', 'Tiếng Việt', 'straße', 'Ωmega']) + ' ';
    if (r.chance(0.05)) out += '\n';
  }
  return out;
}

function emoji(r, size) {
  let out = '';
  while (out.length < size) {
    out += r.pick(EMOJI) + (r.chance(0.3) ? r.pick(EMOJI) : '') + (r.chance(0.5) ? ' ' : '') + (r.chance(0.2) ? r.pick(WORDS) + ' ' : '');
    if (r.chance(0.05)) out += '\n';
  }
  return out;
}

function digits(r, size) {
  let out = '';
  while (out.length < size) {
    const k = r.int(6);
    if (k === 0) out += String(r.int(1e9)).repeat(r.range(1, 3));
    else if (k === 1) out += `${r.int(1000)},${String(r.int(1000)).padStart(3, '0')}.${r.int(100)}`;
    else if (k === 2) out += r.pick(['٣٤٥', '४२', '１２３', '²³', '½', 'Ⅻ', '①②', '𝟙𝟚']);
    else if (k === 3) out += `v${r.int(10)}.${r.int(20)}.${r.int(100)}`;
    else if (k === 4) out += `0x${r.int(1 << 30).toString(16)}`;
    else out += `${r.int(100)}%`;
    out += r.pick([' ', ' ', '\n', ', ', '-', '']);
  }
  return out;
}

function contractions(r, size) {
  const suffixes = ['s', 't', 're', 've', 'm', 'll', 'd'];
  const caseForms = (s) => [s, s.toUpperCase(), s[0].toUpperCase() + s.slice(1), s.length > 1 ? s[0] + s[1].toUpperCase() : s];
  let out = '';
  while (out.length < size) {
    const sfx = r.pick(caseForms(r.pick(suffixes)));
    const before = r.pick(['it', 'IT', 'we', ' ', '', '1', 'x ', '\n', "'", '"', 'ok.', 'é', '中']);
    const after = r.pick(['', ' ', 'a', 'A', 'x y', '\n', '.', "'", '1', 'é', 'ing']);
    out += before + "'" + sfx + after + r.pick([' ', ' ', '', '\n']);
    if (r.chance(0.05)) out += "’s ’LL ''s '' ' ";
  }
  return out;
}

function whitespace(r, size) {
  const ws = [' ', '  ', '\t', '\n', '\r\n', '\r', '\v', '\f', '\u00a0', '\u3000', '\u2028', '\u0085', '\u2003', ' \n', '\t\n', '   \n\n', '\n\n\n', ' \r\n '];
  let out = '';
  while (out.length < size) {
    let s = '';
    for (let i = r.range(1, 5); i > 0; i--) s += r.pick(ws);
    out += r.pick(['word', 'x', '.', '1', '中', '']) + s;
  }
  return out;
}

function specials(r, size) {
  let out = '';
  while (out.length < size) {
    const k = r.int(4);
    if (k === 0) {
      out += `<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n${r.pick(WORDS)} ${r.pick(WORDS)}?<|im_end|>\n<|im_start|>assistant\n<think>\n${r.pick(WORDS)}\n</think>\n\n${r.pick(WORDS)}<|im_end|>\n`;
    } else if (k === 1) {
      out += `<tool_call>\n<function=${r.pick(WORDS)}>\n<parameter=x>\n${r.int(100)}\n</parameter>\n</function>\n</tool_call>`;
    } else if (k === 2) {
      out += r.pick(['', ' ', '  ', '\n', 'a', '中']) + r.pick(SPECIALS) + r.pick(['', ' ', '  ', '\n', 'b', '\u0338', "'s", '\u0301']);
    } else {
      out += r.pick(NEAR_SPECIALS) + r.pick([' ', '', '\n']);
    }
  }
  return out;
}

function randomCodePoints(r, count) {
  // Ranges across scripts (Unicode 16 additions included) plus uniform picks from all planes.
  const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff],
    [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f], [0xe00, 0xe7f], [0x1100, 0x11ff],
    [0x1ab0, 0x1aff], [0x1dc0, 0x1dff], [0x2000, 0x206f], [0x20d0, 0x20ff], [0x2100, 0x214f],
    [0x2190, 0x23ff], [0x2e80, 0x2fdf], [0x3000, 0x30ff], [0x4e00, 0x9fff], [0xa700, 0xa7ff],
    [0xac00, 0xd7a3], [0xe000, 0xe0ff], [0xf900, 0xfaff], [0xfe00, 0xfe0f], [0xff00, 0xffef],
    [0x10d40, 0x10d8f], [0x11380, 0x113ff], [0x11900, 0x1195f], [0x16100, 0x1613f],
    [0x1d400, 0x1d7ff], [0x1e5d0, 0x1e5ff], [0x1f300, 0x1faff], [0x20000, 0x2a6df],
    [0x2ebf0, 0x2ee5d], [0xe0000, 0xe007f]];
  let out = '';
  for (let i = 0; i < count; i++) {
    let cp;
    if (r.chance(0.2)) {
      do cp = r.int(0x110000); while (cp >= 0xd800 && cp <= 0xdfff);
    } else {
      const [lo, hi] = r.pick(ranges);
      cp = r.range(lo, hi);
    }
    out += String.fromCodePoint(cp);
    if (r.chance(0.15)) out += r.pick([' ', '', 'a', '1', '\n', "'s"]);
  }
  return out;
}

// Text with invalid UTF-8 spliced in: lone continuation bytes, truncated sequences (also at the
// very end), overlongs, surrogates, bytes F5..FF.
function invalidBytes(r, size) {
  const bad = [[0x80], [0xbf], [0xc0, 0xaf], [0xc1, 0xbf], [0xc3], [0xe2, 0x82], [0xe0, 0x80, 0x80],
    [0xed, 0xa0, 0x80], [0xf0, 0x9f, 0x98], [0xf4, 0x90, 0x80, 0x80], [0xf5], [0xff, 0xfe],
    [0xf8, 0x88, 0x80, 0x80, 0x80], [0xe2, 0x28, 0xa1], [0xc3, 0x28], [0xe2, 0x82, 0x41]];
  const parts = [];
  let n = 0;
  while (n < size) {
    const t = Buffer.from(r.pick(WORDS) + r.pick([' ', '', '\n', 'é', '中']), 'utf8');
    parts.push(t);
    n += t.length;
    if (r.chance(0.5)) {
      const b = Buffer.from(r.pick(bad));
      parts.push(b);
      n += b.length;
    }
  }
  parts.push(Buffer.from([0xf0, 0x9f, 0x98]));  // truncated at the very end
  return Buffer.concat(parts);
}

export function makeCorpus({ seed = 20240611, scale = 1, root } = {}) {
  const r = rngFrom(seed);
  const s = (n) => Math.round(n * scale);
  const text = (name, str) => ({ name, bytes: Buffer.from(str, 'utf8') });
  return [
    text('english', english(r, s(330000))),
    text('code', sourceCode(r, s(220000), root)),
    text('cjk', cjk(r, s(90000))),
    text('thai', thai(r, s(40000))),
    text('devanagari', devanagari(r, s(40000))),
    text('arabic', arabic(r, s(40000))),
    text('accents', accents(r, s(40000))),
    text('emoji', emoji(r, s(30000))),
    text('digits', digits(r, s(30000))),
    text('contractions', contractions(r, s(30000))),
    text('whitespace', whitespace(r, s(30000))),
    text('specials', specials(r, s(40000))),
    text('random', randomCodePoints(r, s(12000))),
    { name: 'invalid', bytes: invalidBytes(r, s(20000)) },
  ];
}

// Sections joined by blank lines; the corpus ends with the invalid section's truncated bytes.
export function corpusBytes(sections) {
  const parts = [];
  sections.forEach((sec, i) => parts.push(...(i ? [Buffer.from('\n\n')] : []), sec.bytes));
  return Buffer.concat(parts);
}
