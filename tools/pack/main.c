/* minicpmd-pack: tools around packs. Subcommands live in cmd-*.c; this file only
 * dispatches and prints the usage. */
#include "minicpmd-build.h"
#include "tools/pack/pack.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"tokenize", pack_cmd_tokenize,
     "tokenize PACK [--decode] [--no-special] [--bench]\n"
     "                             text on stdin -> JSON token ids (--decode: ids -> text;\n"
     "                             --no-special: special-token strings are text;\n"
     "                             --bench: encode stdin for ~2 s, print MB/s)"},
    {"template", pack_cmd_template,
     "template PACK               OpenAI chat request JSON on stdin -> the rendered prompt"},
    {"gen", pack_cmd_gen,
     "gen --preset P --seed S --out DIR [--kv-heads N] [--format q4nx|hf]\n"
     "                             write a pack with random weights (presets: gen --help);\n"
     "                             --format hf: the same weights as a BF16 HF checkpoint"},
    {"inspect", pack_cmd_inspect,
     "inspect DIR [--json] [--strict]\n"
     "                             architecture, files, tensors, totals and problems of a pack\n"
     "                             (exit 1 when it has an error)"},
    {"convert", pack_cmd_convert,
     "convert HF_DIR|MODEL.gguf OUT_DIR [--kv-heads N] [--tokenizer FILE]\n"
     "                             HF BF16 checkpoint or llama GGUF -> Q4NX pack (Q4_1 matmuls,\n"
     "                             BF16 embedding and norms); --kv-heads: replicate K/V heads\n"
     "                             (NPU packs); --tokenizer: tokenizer.json for a GGUF"},
    {"export-gguf", pack_cmd_export_gguf,
     "export-gguf PACK OUT.gguf [--type q4_1|q4_0]\n"
     "                             Q4NX pack -> llama GGUF for llama.cpp (q4_1: the same\n"
     "                             weights exactly; q4_0: re-quantized)"},
};

static void usage(FILE *out)
{
    fprintf(out, "Usage: minicpmd-pack COMMAND [ARGS]\n\nCommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(out, "  %s\n", commands[i].help);
    fprintf(out, "\nPACK is a pack directory (or the file itself: tokenizer.json for tokenize).\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("minicpmd-pack %s\n", MINICPMD_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "minicpmd-pack: unknown command '%s' (see --help)\n", argv[1]);
    return 2;
}
