//! `--attach FILE` with `--prompt`: text files for the headless turn, read, refused and composed
//! into the prompt by [`gemma_app::attach`] exactly as the app's `/attach` does (a picture among
//! them goes as `--image` does).

use clap::Args;
use gemma_app::attach;
use gemma_engine::protocol::Attachment;

use super::images::ImageArgs;
use super::{ModelArgs, Refused};

/// Text files for the prompt.
#[derive(Debug, Args, Default)]
pub struct AttachArgs {
    /// A text file sent before the prompt, as a fenced block headed by its name (at most
    /// `ui.attach_max_kb`); a quoted glob attaches each file it matches; a picture goes as with
    /// --image. Repeat for several, in order.
    #[arg(long = "attach", value_name = "FILE")]
    pub files: Vec<String>,
}

impl AttachArgs {
    /// The prompt with the files' blocks before it, and the pictures to send with it (`--image`
    /// ones, then pictures given to `--attach`). A file that cannot be attached refuses the run
    /// (exit 2), naming it and why.
    pub fn prompt(
        &self,
        common: &ModelArgs,
        prompt: &str,
        images: &ImageArgs,
    ) -> anyhow::Result<(String, Vec<Attachment>)> {
        let mut pictures = images.attachments()?;
        if self.files.is_empty() {
            return Ok((prompt.to_string(), pictures));
        }
        let max_kb = common.config()?.ui.attach_max_kb;
        let refused = |e: attach::AttachError| Refused(e.to_string());
        let mut files = Vec::new();
        for arg in &self.files {
            for path in attach::expand(arg).map_err(refused)? {
                let name = path.to_string_lossy();
                if attach::looks_like_picture(&name) {
                    let tokens = images.image_tokens;
                    pictures.push(Attachment::image(path, tokens));
                } else if attach::looks_like_audio(&name) {
                    pictures.push(Attachment::audio(path));
                } else {
                    files.push(attach::read_text(&path, max_kb).map_err(refused)?);
                }
            }
        }
        Ok((attach::compose(&files, prompt), pictures))
    }
}
