//! [`write_through!`]: the `AsyncWrite` of a read-side wrapper (a struct with an `inner`
//! stream) that passes every write to `inner` unchanged.

/// Implements `tokio::io::AsyncWrite` for `$wrapper<T>` by forwarding to its `inner` field.
macro_rules! write_through {
    ($wrapper:ident) => {
        impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $wrapper<T> {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                tokio::io::AsyncWrite::is_write_vectored(&self.inner)
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
            }
        }
    };
}

pub(super) use write_through;
