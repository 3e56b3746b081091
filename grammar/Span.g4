// Span.g4 — the .span query language (docs/ARCHITECTURE.md, "The algebra
// and the language").
//
// A module is a list of declarations: params (overridable with --set), lets
// (named expressions), and queries. Several queries form a bulk. Semantic
// checks (names, option types, ranges) live in frontend/, not here, so that
// every error is reported with its location instead of as a parse failure.
grammar Span;

module : decl* EOF ;

decl
    : 'param' ID '=' literal      # paramDecl
    | 'let' ID '=' expr           # letDecl
    | 'query' ID block            # queryDecl
    ;

expr
    : block                                            # crossBlockExpr
    | 'cross' block                                    # crossExpr
    | 'plus' block                                     # plusExpr
    | role=('system' | 'user' | 'assistant') text      # messageExpr
    | 'fragment' text                                  # fragmentExpr
    | 'gen' opts? block                                # genExpr
    | 'chat' opts? block                               # chatExpr
    | 'repeat' '(' count=(INT | ID) ')' block          # repeatExpr
    | 'retrieve' opts                                  # retrieveExpr
    | STRING                                           # stringExpr
    | ID                                               # nameExpr
    ;

text
    : STRING                      # stringText
    | ID                          # nameText
    | 'file' '(' STRING ')'       # fileText
    ;

opts : '(' (opt (',' opt)*)? ')' ;

// Option names may coincide with keywords: retrieve(query = ...).
opt : key=optName '=' literal ;

optName
    : ID | 'param' | 'let' | 'query' | 'cross' | 'plus' | 'system' | 'user'
    | 'assistant' | 'fragment' | 'gen' | 'chat' | 'repeat' | 'retrieve'
    | 'file'
    ;

literal : STRING | INT | FLOAT | ID ;

block : '{' expr* '}' ;

ID : [a-zA-Z_] [a-zA-Z_0-9]* ;

// Signs are part of numbers so that max_tokens = -1 reaches the semantic
// checks and gets a located "must not be negative" error.
INT : '-'? DIGIT+ ;
FLOAT : '-'? DIGIT+ '.' DIGIT* EXPONENT? | '-'? DIGIT+ EXPONENT | '-'? '.' DIGIT+ EXPONENT? ;

STRING
    : '"""' .*? '"""'
    | '"' (ESCAPE | ~["\\\r\n])* '"'
    ;

COMMENT : '#' ~[\r\n]* -> skip ;
WS : [ \t\r\n]+ -> skip ;

// Anything else is a lexical error reported at its location by the frontend.
UNEXPECTED_CHAR : . ;

fragment DIGIT : [0-9] ;
fragment EXPONENT : [eE] [+-]? DIGIT+ ;
fragment ESCAPE : '\\' (["\\/nrt0] | 'u' HEX HEX HEX HEX) ;
fragment HEX : [0-9a-fA-F] ;
