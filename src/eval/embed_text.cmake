# cmake -DINPUT=file -DOUTPUT=file.cc -DSYMBOL=name -P embed_text.cmake: defines `const char* const SYMBOL` in
# namespace moeserve::eval holding the input file's text (a raw string literal; the file must not contain ")embed").
file(READ "${INPUT}" content)
file(WRITE "${OUTPUT}" "// Generated from ${INPUT} by embed_text.cmake.\nnamespace moeserve::eval {\nextern const char* const ${SYMBOL};\nconst char* const ${SYMBOL} = R\"embed(${content})embed\";\n}  // namespace moeserve::eval\n")
