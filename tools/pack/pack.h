/* minicpmd-pack subcommands. Each takes the arguments after its name and returns
 * the process exit code: 0 ok, 1 failure, 2 usage error. */
#ifndef MINICPMD_TOOLS_PACK_H
#define MINICPMD_TOOLS_PACK_H

int pack_cmd_tokenize(int argc, char **argv);  /* tokenize DIR|tokenizer.json [--decode] */
int pack_cmd_template(int argc, char **argv);  /* template DIR|chat_template.jinja */
int pack_cmd_gen(int argc, char **argv);       /* gen --preset P --seed S --out DIR */
int pack_cmd_inspect(int argc, char **argv);   /* inspect DIR [--json] [--strict] */
int pack_cmd_convert(int argc, char **argv);   /* convert HF_DIR|MODEL.gguf OUT_DIR ... */
/* convert of a GGUF file (cmd-convert-gguf.c); tok_path NULL: from its metadata. */
int pack_cmd_export_gguf(int argc, char **argv); /* export-gguf PACK OUT.gguf [--type] */
int pack_convert_gguf(const char *in_path, const char *out_dir, const char *tok_path);

#endif
